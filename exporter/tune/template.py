"""Apply mode's command template: placeholders become references to variables, never the values themselves.

Why: the template is shell text the user wrote (``helm upgrade ... --set-string
"vllm.args={args}"``) and the candidate's values are engine flags that may hold
anything (``$(...)``, backticks, quotes, newlines, a literal ``{changes}``).
Pasting a value into shell text makes the shell parse it, and no quoting of our
own is right in every context the user may have put the placeholder in. So the
values never enter the text: the tuner puts them in the child's environment and
each placeholder is replaced, in one left-to-right pass over the template only,
by a fixed reference that fits its quoting context:

* unquoted: ``"${LLM_TUNE_ARG_1}" "${LLM_TUNE_ARG_2}" ...`` — one shell word per
  argument, byte for byte;
* inside ``"..."``: ``${LLM_TUNE_ARGS}`` — the arguments shell-quoted as one text
  (``shlex.join``); the shell does not re-parse what a variable expands to;
* inside ``'...'``: ``'"${LLM_TUNE_ARGS}"'`` — the quote is closed, the same text
  expanded in double quotes, the quote reopened (still one word).

``{changes}`` (``flag=value`` pairs) and ``{env}`` (the candidate's
``NAME=VALUE`` environment) work the same way. A placeholder where the context
cannot be told for certain (inside backticks, ``${...}``, after a here-document
``<<``) is refused when the tuner starts (``TemplateError``: one line, exit 2).
Whatever the scanner concludes, what it inserts holds no value, so a wrong
guess can at worst split or glob a value, never execute it (only ``eval`` in
the template itself could, and that is the template's own doing).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: placeholder name -> (the variable holding the shell-quoted text, the prefix of the one-per-word variables)
PLACEHOLDERS: dict[str, tuple[str, str]] = {
    "args": ("LLM_TUNE_ARGS", "LLM_TUNE_ARG_"),
    "changes": ("LLM_TUNE_CHANGES", "LLM_TUNE_CHANGE_"),
    "env": ("LLM_TUNE_ENV", "LLM_TUNE_ENV_"),
}
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
#: characters after which a ``#`` starts a comment (a word starts there)
_WORD_BREAK = " \t\n;&|()<>"


class TemplateError(ValueError):
    """A template the tuner will not run: one line, naming what to change."""


def _words(name: str, counts: Mapping[str, int]) -> str:
    _, prefix = PLACEHOLDERS[name]
    return " ".join(f'"${{{prefix}{i}}}"' for i in range(1, counts.get(name, 0) + 1))


def _text(name: str) -> str:
    return "${" + PLACEHOLDERS[name][0] + "}"


class _Scanner:
    """One pass over the template: copies it, replacing each placeholder by the reference its context needs."""

    def __init__(self, template: str, counts: Mapping[str, int]) -> None:
        self.t, self.counts = template, counts
        self.out: list[str] = []
        self.i = 0
        self.heredoc = False

    def _placeholder(self) -> str | None:
        m = _PLACEHOLDER.match(self.t, self.i)
        if m is None:
            return None
        if self.heredoc:
            raise TemplateError(
                f"--apply: {{{m.group(1)}}} after a here-document (<<) is not supported; read $LLM_TUNE_ARGS_FILE instead"
            )
        self.i = m.end()
        return m.group(1)

    def _refuse_inside(self, end: int, what: str) -> None:
        m = _PLACEHOLDER.search(self.t, self.i, end)
        if m is not None:
            raise TemplateError(f'--apply: {{{m.group(1)}}} inside {what} is not supported; use $(...) or "..." around it')

    def _copy_to(self, end: int) -> None:
        self.out.append(self.t[self.i : end])
        self.i = end

    def _backticks(self) -> None:
        j = self.i + 1
        while j < len(self.t) and self.t[j] != "`":
            j += 2 if self.t[j] == "\\" else 1
        if j >= len(self.t):
            raise TemplateError("--apply: a backtick (`) is not closed")
        self._refuse_inside(j, "backticks")
        self._copy_to(j + 1)

    def _parameter(self) -> None:
        """``${...}``: copied whole (nested braces counted)."""
        depth, j = 0, self.i + 1
        while j < len(self.t):
            if self.t[j] == "{":
                depth += 1
            elif self.t[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if j >= len(self.t):
            raise TemplateError("--apply: a ${ is not closed")
        self._refuse_inside(j, "${...}")
        self._copy_to(j + 1)

    def _single(self) -> None:
        end = self.t.find("'", self.i + 1)
        if end < 0:
            raise TemplateError("--apply: a single quote (') is not closed")
        self.out.append("'")
        self.i += 1
        while self.i < end:
            name = self._placeholder()
            if name is not None:
                self.out.append("'\"" + _text(name) + "\"'")
            else:
                self.out.append(self.t[self.i])
                self.i += 1
        self.out.append("'")
        self.i = end + 1

    def _expansion(self) -> bool:
        """``$(``, ``${`` or a backtick at the cursor, the same in and out of double quotes: scanned
        (or refused) and True; anything else False, the cursor unmoved."""
        if self.t.startswith("$(", self.i):
            self._copy_to(self.i + 2)
            self.plain(nested=True)
        elif self.t.startswith("${", self.i):
            self._parameter()
        elif self.t.startswith("`", self.i):
            self._backticks()
        else:
            return False
        return True

    def double(self) -> None:
        """Inside ``"..."`` (the opening quote copied already) up to and including the closing one."""
        while self.i < len(self.t):
            c = self.t[self.i]
            name = self._placeholder()
            if name is not None:
                self.out.append(_text(name))
            elif c == "\\":
                self._copy_to(min(self.i + 2, len(self.t)))
            elif c == '"':
                self._copy_to(self.i + 1)
                return
            elif not self._expansion():
                self._copy_to(self.i + 1)
        raise TemplateError('--apply: a double quote (") is not closed')

    def plain(self, nested: bool = False) -> None:
        """Unquoted text; ``nested``: inside ``$(`` (copied already), up to and including its ``)``."""
        depth = 0
        while self.i < len(self.t):
            c = self.t[self.i]
            at_word = self.i == 0 or self.t[self.i - 1] in _WORD_BREAK
            name = self._placeholder()
            if name is not None:
                self.out.append(_words(name, self.counts))
            elif c == "\\":
                self._copy_to(min(self.i + 2, len(self.t)))
            elif c == "'":
                self._single()
            elif c == '"':
                self._copy_to(self.i + 1)
                self.double()
            elif c == "#" and at_word:
                end = self.t.find("\n", self.i)
                self._copy_to(len(self.t) if end < 0 else end)
            elif self._expansion():
                pass
            elif self.t.startswith("<<<", self.i):
                self._copy_to(self.i + 3)
            elif self.t.startswith("<<", self.i):
                self.heredoc = True
                self._copy_to(self.i + 2)
            elif c == "(":
                depth += 1
                self._copy_to(self.i + 1)
            elif c == ")":
                self._copy_to(self.i + 1)
                if depth == 0 and nested:
                    return
                depth = max(0, depth - 1)
            else:
                self._copy_to(self.i + 1)
        if nested:
            raise TemplateError("--apply: a $( is not closed")


def expand(template: str, counts: Mapping[str, int] | None = None) -> str:
    """The shell text to run: ``template`` with each placeholder replaced once, by a variable reference.

    ``counts``: how many words each placeholder stands for unquoted (``{"args": 3}``); raises TemplateError.
    """
    scanner = _Scanner(template, counts or {})
    scanner.plain()
    return "".join(scanner.out)


def check(template: str) -> None:
    """TemplateError (one line) when the tuner would refuse ``template``; at start-up, before anything runs."""
    if "\0" in template:
        raise TemplateError("--apply: the template holds a NUL character")
    expand(template)


__all__ = ["PLACEHOLDERS", "TemplateError", "check", "expand"]
