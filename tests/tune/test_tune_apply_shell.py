"""Apply mode through the real ``/bin/sh``: no engine flag value is ever parsed as shell code (issue 37, item 1).

Every documented template shape (unquoted, ``"..."``, ``'...'``, helm's ``--set-string
"x={args}"``, ``{changes}``, ``{env}``, ``$LLM_TUNE_ARGS_FILE``) is run by ``run_apply`` with
values holding ``$(touch FILE)``, backticks, both quotes, ``;``, newlines, ``$HOME``, a glob
and a literal ``{changes}``; the command records the argv it got, and the test asserts that no
marker file appeared and the values arrived byte for byte.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from exporter.tune.apply import run_apply
from exporter.tune.argv import Change, EngineCommand
from tests.tune.hostile_values import candidate as _candidate

#: a program that appends the argv it was given (without its own name) to the JSON-lines file $DUMP_OUT
DUMP = "import json, os, sys\nwith open(os.environ['DUMP_OUT'], 'a') as f:\n    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"


@pytest.fixture()
def stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tmp_path with the dump program as ``dump`` and ``helm`` on PATH, and $DUMP_OUT set."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("dump", "helm"):
        prog = bin_dir / name
        prog.write_text(f"#!{sys.executable}\n{DUMP}")
        prog.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("DUMP_OUT", str(tmp_path / "argv.jsonl"))
    monkeypatch.chdir(tmp_path)  # a glob that escaped would list these files
    return tmp_path


def _run(stage: Path, template: str) -> list[list[str]]:
    cmd, changes = _candidate(stage)
    out = stage / "argv.jsonl"
    out.unlink(missing_ok=True)
    why = run_apply(template, cmd, changes, stage / "apply.log", 30.0)
    assert why is None, (why, (stage / "apply.log").read_text())
    assert not list(stage.glob("pwned*")), "a value was executed by the shell"
    return [json.loads(line) for line in out.read_text().splitlines()]


def _pairs(changes: list[Change]) -> list[str]:
    return [f"{c.flag}={c.new}" for c in changes if c.new is not None]


def test_unquoted_args_are_one_word_each_byte_for_byte(stage: Path) -> None:
    cmd, _ = _candidate(stage)
    assert _run(stage, "dump {args}") == [cmd.argv[1:]]


def test_inline_python_template_as_the_issue_writes_it(stage: Path) -> None:
    cmd, _ = _candidate(stage)
    out = stage / "inline.json"
    template = f'{shlex.quote(sys.executable)} -c \'import json,sys; json.dump(sys.argv[1:], open("{out}","w"))\' {{args}}'
    _run(stage, template + " && dump done")
    assert json.loads(out.read_text()) == cmd.argv[1:]


@pytest.mark.parametrize("quote", ['"', "'"])
def test_quoted_args_are_one_word_the_shell_quoted_text(stage: Path, quote: str) -> None:
    cmd, _ = _candidate(stage)
    (got,) = _run(stage, f"dump {quote}{{args}}{quote} {quote}pre {{args}} post{quote}")
    assert got == [shlex.join(cmd.argv[1:]), f"pre {shlex.join(cmd.argv[1:])} post"]
    assert shlex.split(got[0]) == cmd.argv[1:]  # the text parses back to the same arguments


def test_the_documented_helm_template(stage: Path) -> None:
    """docs/tune.md's example, word for word, with a fake helm that records its argv."""
    cmd, _ = _candidate(stage)
    (got,) = _run(stage, 'helm upgrade vllm ./chart --reuse-values --set-string "vllm.args={args}" --wait')
    assert got == [
        "upgrade",
        "vllm",
        "./chart",
        "--reuse-values",
        "--set-string",
        f"vllm.args={shlex.join(cmd.argv[1:])}",
        "--wait",
    ]


def test_helm_set_string_in_single_quotes_and_unquoted_prefix(stage: Path) -> None:
    cmd, _ = _candidate(stage)
    joined = shlex.join(cmd.argv[1:])
    (got,) = _run(stage, "helm --set-string 'vllm.args={args}' --set x={args}")
    assert got == ["--set-string", f"vllm.args={joined}", "--set", f"x={cmd.argv[1]}", *cmd.argv[2:]]


def test_changes_and_env_placeholders(stage: Path) -> None:
    cmd, changes = _candidate(stage)
    env_words = [f"{k}={v}" for k, v in cmd.env.items()]
    got = _run(stage, 'dump {changes}; dump "{changes}"; dump {env}; dump "{env}"; dump \'{changes}\'')
    assert got == [
        _pairs(changes),
        [shlex.join(_pairs(changes))],
        env_words,
        [shlex.join(env_words)],
        [shlex.join(_pairs(changes))],
    ]


def test_the_variables_and_the_args_file(stage: Path) -> None:
    cmd, changes = _candidate(stage)
    template = (
        'dump "$LLM_TUNE_ARGS" "$LLM_TUNE_CHANGES" "$LLM_TUNE_ENV"; '
        f'{shlex.quote(sys.executable)} -c \'import json,os; p = os.environ["LLM_TUNE_ARGS_FILE"]; '
        'print(json.dumps({"path": p, "doc": json.load(open(p))}))\' > file.json'
    )
    (got,) = _run(stage, template)
    env_words = [f"{k}={v}" for k, v in cmd.env.items()]
    assert got == [shlex.join(cmd.argv[1:]), shlex.join(_pairs(changes)), shlex.join(env_words)]
    seen = json.loads((stage / "file.json").read_text())
    doc = seen["doc"]
    assert doc["argv"] == cmd.full() and doc["args"] == cmd.argv[1:] and doc["env"] == cmd.env
    assert doc["args_shell"] == shlex.join(cmd.argv[1:]) and doc["changes_shell"] == shlex.join(_pairs(changes))
    assert doc["changes"][0] == changes[0].as_dict()
    assert not Path(seen["path"]).exists()  # removed after the command


def test_placeholders_inside_command_substitution(stage: Path) -> None:
    cmd, _ = _candidate(stage)
    got = _run(stage, 'dump "$(printf "%s|" {args})" $(true {changes})')
    assert got == [["|".join(cmd.argv[1:]) + "|"]]


def test_the_apply_log_holds_no_credential_while_the_command_gets_it(stage: Path) -> None:
    """The log keeps the template, the candidate redacted and the command's output with the values taken out."""
    cmd = EngineCommand.parse(
        ["OPENAI_API_KEY=sk-envSECRET456", "vllm", "serve", "m", "--api-key", "sk-SECRET123", "--hf-token=hf_abc"]
    )
    changes = [Change("--api-key", "old-key-1", "sk-SECRET123"), Change("--max-num-seqs", "4", "8")]
    log = stage / "apply.log"
    template = 'dump {args} {env}; echo {args} "{changes}" "$LLM_TUNE_ENV"; cat "$LLM_TUNE_ARGS_FILE"'
    assert run_apply(template, cmd, changes, log, 30.0) is None
    (got,) = [json.loads(line) for line in (stage / "argv.jsonl").read_text().splitlines()]
    assert got == [*cmd.argv[1:], "OPENAI_API_KEY=sk-envSECRET456"]  # the command got the real values
    text = log.read_text()
    assert text.startswith(f"$ {template}\n") and "<redacted>" in text and "--max-num-seqs=8" in text
    for secret in ("sk-SECRET123", "hf_abc", "sk-envSECRET456"):
        assert secret not in text, text
