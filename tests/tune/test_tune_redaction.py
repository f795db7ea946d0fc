"""Credentials in the engine command never reach a record, a report or the terminal; the engine still gets them (issue 37, item 2).

In-process: a Tuner whose measurements are ramp records built here (tests/tune/records.py)
runs a baseline and one accepted trial; tune.json, report.md, report.html, the tuner's
terminal lines and the closing paragraph are searched for each secret. What is launched
(launch.py's argv and environment, apply mode's variables and file) keeps the real values.
The apply log is checked through the real shell in test_tune_apply_shell.py.
"""

from __future__ import annotations

import io
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from exporter.capacity import fingerprint as fpr
from exporter.commands.tune import _summary
from exporter.tune import apply, record, redact, report
from exporter.tune.argv import Change, EngineCommand
from exporter.tune.capacity import SLO
from exporter.tune.launch import EngineProcess
from exporter.tune.session import Measurement, Tuner, TuneResult, TuneSettings
from tests.tune.records import report as ramp_report
from tests.tune.records import step

SECRETS = ("sk-SECRET123", "hf_abc", "sk-envSECRET456", "hf_envtok789")
COMMAND = [
    "OPENAI_API_KEY=sk-envSECRET456",
    "HF_TOKEN=hf_envtok789",
    "vllm",
    "serve",
    "m",
    "--api-key",
    "sk-SECRET123",
    "--hf-token=hf_abc",
    "--max-num-seqs",
    "8",
]
REDACTED = [
    "env",
    "OPENAI_API_KEY=<redacted>",
    "HF_TOKEN=<redacted>",
    "vllm",
    "serve",
    "m",
    "--api-key",
    "<redacted>",
    "--hf-token=<redacted>",
    "--max-num-seqs",
    "8",
]
SLO_TTFT = SLO(ttft_s=0.5)
KV = ("memory", "kv_cache_pressure")


@pytest.mark.parametrize(
    "name",
    [
        "--api-key",
        "--hf-token",
        "-hft",
        "--admin-api-key",
        "--api-key-file",
        "--token",
        "--password",
        "--db-password",
        "--client-secret",
        "--apikey",
        "--api_key",
        "OPENAI_API_KEY",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "WANDB_API_KEY",
        "MY_PASSWORD",
        "VAULT_SECRET",
    ],
)
def test_credential_names(name: str) -> None:
    assert redact.is_secret(name)


@pytest.mark.parametrize(
    "name",
    [
        "--max-num-batched-tokens",
        "--max-total-tokens",
        "--max_num_tokens",
        "--max-input-tokens",
        "--tokenizer",
        "--skip-tokenizer-init",
        "--port",
        "--kv-cache-dtype",
        "--ssl-keyfile",
        "-np",
        "MAX_BATCH_TOTAL_TOKENS",
        "VLLM_CPU_KVCACHE_SPACE",
        "LLAMA_ARG_BATCH",
    ],
)
def test_settings_are_not_credentials(name: str) -> None:
    assert not redact.is_secret(name)


def test_every_form_of_a_command_line_is_redacted_and_redacting_twice_changes_nothing() -> None:
    cmd = EngineCommand.parse(COMMAND)
    assert redact.argv(cmd.full()) == REDACTED
    assert redact.argv(REDACTED) == REDACTED
    assert redact.argv(["llama-server", "-hft", "hf_x1", "--api-key", "--port", "1"]) == [
        "llama-server",
        "-hft",
        "<redacted>",
        "--api-key",  # bare (the next word is a flag): nothing to hide
        "--port",
        "1",
    ]
    assert redact.values(cmd.full()) == sorted(SECRETS, key=lambda s: (-len(s), s))
    assert redact.change({"flag": "--api-key", "from": "a-key", "to": None}) == {
        "flag": "--api-key",
        "from": "<redacted>",
        "to": None,
    }


def _ramp(rps_at_4: float, ttft_at_4: float, cause: tuple[str, str] | None) -> dict[str, Any]:
    steps = [step(1, 1.0, 0.1), step(2, 1.9, 0.2), step(4, rps_at_4, ttft_at_4, primary=cause)]
    return ramp_report(steps, knee_index=2 if cause else None, cause=cause)


class _Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def ramp_observer(self, label: str, repeat: int, steps: int) -> Any:
        return None

    def line(self, text: str) -> None:
        self.lines.append(text)


def _tune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[TuneResult, list[str], EngineCommand]:
    """A baseline (KV pressure at the knee) and one accepted trial, measured by records built here."""
    base = EngineCommand.parse(COMMAND)
    settings = TuneSettings(
        slo=SLO_TTFT,
        out=tmp_path,
        concurrency=(1, 2, 4),
        step_seconds=1.0,
        prompt_tokens=8,
        output_tokens=8,
        trials=1,
        engine_url="http://127.0.0.1:9",
        apply="true {args}",
    )
    hooks = _Lines()
    tuner = Tuner(settings, base, hooks)

    def measure(cmd: EngineCommand, label: str) -> Measurement:
        runs = [_ramp(2.0, 2.0, KV)] * 2 if label == "baseline" else [_ramp(3.8, 0.3, None)] * 2
        warm = {"concurrency": 4, "seconds": 1.0, "requests": 3, "errors": 1, "error_messages": ["401: bad key sk-SECRET123"]}
        return Measurement(label, cmd, runs, None, 1.0, warm)

    monkeypatch.setattr(tuner, "measure", measure)
    result = tuner.run()
    return result, hooks.lines, base


def test_records_reports_and_terminal_lines_hold_no_credential(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, lines, base = _tune(tmp_path, monkeypatch)
    assert result.trials and result.trials[0].accepted, lines
    doc = record.build(result, SLO_TTFT, "vllm", "apply")
    record.write(tmp_path, doc)
    (tmp_path / "report.md").write_text(report.markdown(doc))
    (tmp_path / "report.html").write_text(report.html_page(report.markdown(doc)))
    out = io.StringIO()
    _summary(Console(file=out, width=300), doc, tmp_path)

    written = {p.name: p.read_text() for p in tmp_path.iterdir() if p.is_file()}
    assert {"tune.json", "report.md", "report.html"} <= set(written)
    shown = {**written, "terminal lines": "\n".join(lines), "summary": out.getvalue()}
    for secret in SECRETS:
        for where, text in shown.items():
            assert secret not in text, f"{secret} in {where}"
    # the places a command line is recorded all hold the redacted one
    trial = doc["trials"][0]
    assert doc["baseline"]["argv"] == REDACTED and doc["rollback"]["argv"] == REDACTED
    assert doc["baseline"]["fingerprint"]["argv"] == REDACTED and doc["left_running"]["argv"] == REDACTED
    assert trial["argv"][:9] == REDACTED[:9] and doc["recommendation"]["argv"] == trial["argv"]
    assert "<redacted>" in written["report.md"] and "<redacted>" in lines[0]
    assert doc["baseline"]["warmup"]["error_messages"] == ["401: bad key <redacted>"]
    # and the commands themselves still carry the real values
    assert base.full()[:3] == ["env", "OPENAI_API_KEY=sk-envSECRET456", "HF_TOKEN=hf_envtok789"]
    assert "sk-SECRET123" in result.trials[0].measurement.cmd.argv


def test_the_fingerprint_compares_without_the_credentials() -> None:
    runs = [_ramp(2.0, 2.0, KV)]

    def doc(key: str) -> dict[str, Any]:
        cmd = EngineCommand.parse(["vllm", "serve", "m", "--api-key", key, "--max-num-seqs", "8"])
        return record.build(TuneResult(baseline=Measurement("baseline", cmd, runs)), SLO_TTFT, "vllm", "launch")

    a, b = doc("sk-one-key"), doc("sk-other-key")
    assert a["baseline"]["fingerprint"] == b["baseline"]["fingerprint"]
    fa = fpr.parse(a["baseline"]["fingerprint"], "a")
    fb = fpr.parse(b["baseline"]["fingerprint"], "b")
    assert fa is not None and fb is not None and fa == fb and fpr.differences(fa, fb) == []


def test_the_engine_and_the_apply_command_get_the_real_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cmd = EngineCommand.parse(COMMAND)
    changes = [Change("--max-num-seqs", "4", "8")]
    seen: dict[str, Any] = {}

    class FakePopen:
        """Records what launch.py would start; exits at once (no process is started)."""

        pid, returncode = 4242, 1

        def __init__(self, argv: list[str], env: dict[str, str], **_: Any) -> None:
            seen["argv"], seen["env"] = argv, env

        def poll(self) -> int:
            return 1

    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    why = EngineProcess(cmd, "http://127.0.0.1:9", tmp_path / "engine.log").start(1.0)
    assert why is not None and "exited" in why
    assert seen["argv"] == cmd.argv and "sk-SECRET123" in seen["argv"] and "--hf-token=hf_abc" in seen["argv"]
    assert seen["env"]["OPENAI_API_KEY"] == "sk-envSECRET456" and seen["env"]["HF_TOKEN"] == "hf_envtok789"

    env = apply.child_env(cmd, changes)
    assert "sk-SECRET123" in env["LLM_TUNE_ARGS"] and "OPENAI_API_KEY=sk-envSECRET456" in env["LLM_TUNE_ENV"]
    assert apply.candidate(cmd, changes)["argv"] == cmd.full()


def test_the_engines_own_log_is_masked_once_it_started_and_when_it_is_left_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM logs its non-default arguments as it starts, the API key among them: the tuner masks the
    engine's log in place (the engine keeps writing to it), same length, so later output lands after it."""
    cmd = EngineCommand.parse(COMMAND)
    handles: list[Any] = []

    class LoggingPopen:
        """Writes what vLLM prints at start-up into the log it is given, then stays 'running'."""

        pid, returncode = 4242, None

        def __init__(self, argv: list[str], env: dict[str, str], stdout: Any, **_: Any) -> None:
            handle = open(stdout.name, "ab")  # the engine's own descriptor, as a child holds it
            handle.write(f"INFO non-default args: {{'api_key': '{argv[argv.index('--api-key') + 1]}'}}\n".encode())
            handle.write(f"INFO env HF_TOKEN={env['HF_TOKEN']} OPENAI_API_KEY={env['OPENAI_API_KEY']}\n".encode())
            handle.flush()
            handles.append(handle)

        def poll(self) -> None:
            return None

    monkeypatch.setattr(subprocess, "Popen", LoggingPopen)
    monkeypatch.setattr("exporter.tune.launch.wait_healthy", lambda *_a, **_k: None)
    log = tmp_path / "engine-baseline.log"
    engine = EngineProcess(cmd, "http://127.0.0.1:9", log)
    assert engine.start(1.0) is None
    assert log.stat().st_mode & 0o077 == 0  # nobody but the tuner's user reads it
    size = log.stat().st_size
    text = log.read_text()
    assert not [s for s in ("sk-SECRET123", "sk-envSECRET456", "hf_envtok789") if s in text], text
    assert "'api_key': '************'" in text  # as many marks as the key had characters
    # the engine goes on writing through its own descriptor: after the masked text, never over it
    handles[0].write(b"INFO serving, and now it logs sk-SECRET123 again\n")
    handles[0].flush()
    assert log.stat().st_size > size and log.read_text().startswith(text)
    assert engine.detach() == 4242  # left running: what it wrote since is masked too
    assert "sk-SECRET123" not in log.read_text() and "and now it logs ************ again" in log.read_text()
    handles[0].close()


def test_masking_a_file_keeps_its_length_and_leaves_clean_files_untouched(tmp_path: Path) -> None:
    path = tmp_path / "engine.log"
    path.write_bytes(b"key=sk-SECRET123 token=hf_abc end\n")
    assert redact.scrub_file(path, ["sk-SECRET123", "hf_abc"]) == 2
    assert path.read_bytes() == b"key=************ token=****** end\n"
    before = path.stat().st_mtime_ns
    assert redact.scrub_file(path, ["sk-SECRET123"]) == 0 and path.stat().st_mtime_ns == before
    assert redact.scrub_file(tmp_path / "absent.log", ["sk-SECRET123"]) == 0
