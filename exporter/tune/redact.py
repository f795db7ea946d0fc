"""Credentials in an engine command line: what the tuner writes or prints shows ``<redacted>``; the engine gets the value.

Why one module: tune.json, report.md/html, the apply logs and the terminal are
made to be shared (attached to a ticket, pasted into a review), and an engine
command often carries an API key or a hub token (``--api-key sk-...``,
``HF_TOKEN=hf_...``). Every writer passes command lines, changes and free text
through here; the launched process (launch.py's environment and argv, the apply
command's ``LLM_TUNE_*`` variables and file) keeps the real value. Redacting is
idempotent and a redacted command line stays the same length, so two commands
that differ only in a credential record the same (their fingerprints compare
equal).

A name is a credential when one of its words (split at ``-``, ``_``, ``.``) is
token, password, passwd, secret, apikey or credential(s), its last word is
key, or it holds api then key (``--api-key-file`` too): ``--api-key``, ``--hf-token``, ``--admin-api-key``, ``OPENAI_API_KEY``,
``AWS_SECRET_ACCESS_KEY``, ``HF_TOKEN``. ``tokens`` (a batch budget such as
``--max-num-batched-tokens``) and ``tokenizer`` are other words, not credentials.
Short spellings the rule cannot read are listed (llama.cpp's ``-hft``). The engine's own log
is masked in place (``scrub_file``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

MARK = "<redacted>"
#: words that make a flag or variable name a credential's
SECRET_WORDS = frozenset({"token", "password", "passwd", "secret", "apikey", "credential", "credentials"})
#: spellings the word rule cannot see: llama.cpp's -hft (--hf-token)
SECRET_SHORT_FLAGS = frozenset({"-hft"})
#: a value shorter than this is not searched for in free text (it would match ordinary words)
MIN_SCRUB_LEN = 4
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def is_secret(name: str) -> bool:
    """Whether flag or environment variable ``name`` (``--api-key``, ``HF_TOKEN``) carries a credential."""
    if name in SECRET_SHORT_FLAGS:
        return True
    words = [w for w in re.split(r"[-_.]+", name.lstrip("-").lower()) if w]
    if not words:
        return False
    api_key = any(a == "api" and b == "key" for a, b in zip(words, words[1:]))
    return words[-1] == "key" or api_key or any(w in SECRET_WORDS for w in words)


def _walk(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(``args`` redacted, the values taken out): leading ``env``/``NAME=VALUE``, then ``--flag V`` and ``--flag=V``."""
    out, found = list(args), []
    i = 1 if out and out[0] == "env" else 0
    while i < len(out) and _ENV.match(out[i]):
        name, _, value = out[i].partition("=")
        if is_secret(name) and value != MARK:
            out[i] = f"{name}={MARK}"
            found.append(value)
        i += 1
    while i < len(out):
        tok = out[i]
        head, eq, value = tok.partition("=")
        if tok.startswith("-") and is_secret(head):
            if eq:
                if value != MARK:
                    out[i] = f"{head}={MARK}"
                    found.append(value)
            elif i + 1 < len(out) and not out[i + 1].startswith("--"):
                i += 1
                if out[i] != MARK:
                    found.append(out[i])
                    out[i] = MARK
        i += 1
    return out, found


def argv(args: Sequence[str]) -> list[str]:
    """A command line (``EngineCommand.full()`` or argv) with every credential's value replaced by MARK."""
    return _walk(args)[0]


def command_line(args: Sequence[str]) -> str:
    """``argv(args)`` shell-quoted: the form printed on the terminal and in the reports."""
    return shlex.join(argv(args))


def env(values: Mapping[str, str]) -> dict[str, str]:
    """Environment assignments with every credential's value replaced."""
    return {k: (MARK if is_secret(k) else v) for k, v in values.items()}


def change(c: Mapping[str, Any]) -> dict[str, Any]:
    """A change as tune.json writes it (``flag``, ``from``, ``to``), its values hidden when the flag is a credential."""
    out = dict(c)
    if is_secret(str(out.get("flag", ""))):
        for key in ("from", "to"):
            if out.get(key) is not None:
                out[key] = MARK
    return out


def values(*commands: Sequence[str]) -> list[str]:
    """The credential values in ``commands``, longest first: what ``text`` and ``scrub`` look for in free text."""
    found = {v for args in commands for v in _walk(args)[1] if len(v) >= MIN_SCRUB_LEN}
    return sorted(found, key=lambda v: (-len(v), v))


def text(s: str, secrets: Iterable[str]) -> str:
    """``s`` with every one of ``secrets`` (from ``values``) replaced by MARK: for log and terminal lines."""
    for secret in secrets:
        if secret and secret in s:
            s = s.replace(secret, MARK)
    return s


def scrub_file(path: Path, secrets: Sequence[str]) -> int:
    """Mask ``secrets`` in the file at ``path`` in place, each by as many ``*`` as it has bytes; the count masked.

    Why in place and the same length: the engine's own output (``DIR/engine-<stage>.log``) is written
    by the engine straight to the file (a pipe through the tuner would break the engine the tuner
    leaves running when it exits), and vLLM logs its non-default arguments, the API key among them.
    A masked file keeps every offset, so an engine still appending writes after it, not over it."""
    needles = [v.encode() for v in secrets if v]
    if not needles:
        return 0
    try:
        with open(path, "r+b") as f:
            data = f.read()
            masked = data
            for needle in needles:
                masked = masked.replace(needle, b"*" * len(needle))
            if masked == data:
                return 0
            f.seek(0)
            f.write(masked)
    except FileNotFoundError:
        return 0
    return sum(data.count(n) for n in needles)


def scrub(doc: Any, secrets: Sequence[str]) -> Any:
    """A copy of a JSON-like document with ``secrets`` replaced in every string: the last guard before a record is written."""
    if not secrets:
        return doc
    if isinstance(doc, str):
        return text(doc, secrets)
    if isinstance(doc, dict):
        return {k: scrub(v, secrets) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [scrub(v, secrets) for v in doc]
    return doc


__all__ = [
    "MARK",
    "SECRET_SHORT_FLAGS",
    "SECRET_WORDS",
    "argv",
    "change",
    "command_line",
    "env",
    "is_secret",
    "scrub",
    "text",
    "values",
]
