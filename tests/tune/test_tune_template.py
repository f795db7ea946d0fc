"""Apply templates read without a shell: the script the tuner runs holds no engine flag value (issue 37, item 1).

The unit half of the injection proof. ``render`` turns every placeholder into a reference to a
``LLM_TUNE_*`` variable, wherever it stands (unquoted, ``"..."``, ``'...'``, inside ``$(...)``), so
the text the shell parses is the template's own: no value of an argument, a change or an
environment move is in it, and nothing in a value can be parsed as code. That the shell then
gives the command each value byte for byte, and that nothing executes, is proven through the
real ``/bin/sh`` in tests/tune/test_tune_apply_shell.py (stack tier: it starts processes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.cli import main
from exporter.tune.apply import render
from exporter.tune.argv import Change, EngineCommand
from exporter.tune.template import TemplateError, check, expand
from tests.tune.hostile_values import candidate

#: every template shape docs/tune.md documents or the shell tests run
TEMPLATES = (
    "dump {args}",
    'dump "{args}" "pre {args} post"',
    "dump '{args}' 'pre {args} post'",
    'helm upgrade vllm ./chart --reuse-values --set-string "vllm.args={args}" --wait',
    "helm --set-string 'vllm.args={args}' --set x={args}",
    'dump {changes}; dump "{changes}"; dump {env}; dump "{env}"; dump \'{changes}\'',
    'dump "$(printf "%s|" {args})" $(true {changes})',
    'dump "$LLM_TUNE_ARGS" "$LLM_TUNE_CHANGES" "$LLM_TUNE_ENV" < "$LLM_TUNE_ARGS_FILE"',
)


def _values(tmp: Path) -> list[str]:
    """Every value the candidate carries that could be code: arguments, changes and environment moves."""
    cmd, changes = candidate(tmp)
    found = [*cmd.argv[1:], *cmd.env.values()]
    found += [str(v) for c in changes for v in (c.old, c.new) if v is not None]
    return [v for v in found if len(v.strip()) >= 3]


@pytest.mark.parametrize("template", TEMPLATES)
def test_the_rendered_script_holds_no_value_only_the_templates_own_text(template: str, tmp_path: Path) -> None:
    cmd, changes = candidate(tmp_path)
    script = render(template, cmd, changes)
    leaked = [v for v in _values(tmp_path) if v in script and v not in template]
    assert not leaked, (leaked, script)
    # nothing that runs code but what the template itself wrote
    for construct in ("$(", "`", ";", "\n"):
        assert script.count(construct) == template.count(construct), (construct, script)
    assert "pwned" not in script


def test_a_literal_placeholder_in_a_value_is_not_replaced() -> None:
    cmd = EngineCommand(["vllm", "--a", "{changes}", "--b", "{args}"], {}, "vllm")
    script = render("run {args} {changes}", cmd, [Change("--a", None, "{args}")])
    assert "{" not in script.replace("${", "")  # only variable references: the values are not in the text


def test_a_comment_and_escapes_are_left_alone() -> None:
    assert expand("echo \\{args} # {args}", {"args": 1}) == "echo \\{args} # {args}"


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("echo `echo {args}`", "inside backticks"),
        ("cat <<EOF\n{args}\nEOF", "here-document"),
        ("echo ${X:-{args}}", "inside ${...}"),
        ('echo "{args}', "double quote"),
        ("echo '{args}", "single quote"),
        ("echo $(echo {args}", "$( is not closed"),
    ],
)
def test_templates_the_tuner_refuses(template: str, message: str) -> None:
    with pytest.raises(TemplateError) as err:
        check(template)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_refused_template_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["tune", "--slo-ttft", "1s", "--engine-url", "http://127.0.0.1:1", "--apply", "x `{args}`", "--", "vllm", "serve", "m"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "inside backticks" in err and len(err.splitlines()) == 1, err
