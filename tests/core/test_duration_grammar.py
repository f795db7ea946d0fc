"""One duration grammar for every setting in seconds (exporter/values.py, issue 32).

Why: ``tune --slo-ttft 500ms`` worked while ``diagnosis: {slo_ttft_p95_seconds: 500ms}`` was
exit 2, and "5ss" passed as 5 there. Here: the grammar's accepted and refused spellings, and
that the config file, the environment, serve's flags and the other commands' flags all read it.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import pytest

from exporter.config import add_serve_arguments, load_config
from exporter.diagnosis.thresholds import Thresholds
from exporter.errors import UsageError
from exporter.values import DurationError, duration_seconds, parse_duration, positive_seconds, seconds_type


@pytest.mark.parametrize(
    ("spelled", "seconds"),
    [
        ("500ms", 0.5),
        ("2s", 2.0),
        ("1m30s", 90.0),
        ("1h30m", 5400.0),
        ("7d", 604800.0),
        ("1w", 604800.0),
        ("0.5h", 1800.0),
        (".5s", 0.5),
        ("250us", 250e-6),
        ("250\u00b5s", 250e-6),
        ("1d2h3m4s5ms", 93784.005),
        ("5 ms", 0.005),
        (" 2s ", 2.0),
        ("2S", 2.0),
        ("90", 90.0),  # a bare number is seconds
        ("1.5", 1.5),
        ("+2", 2.0),
        ("1e-1", 0.1),
        ("0", 0.0),
        ("0s", 0.0),
        (3, 3.0),  # YAML numbers
        (0.25, 0.25),
    ],
)
def test_accepted_spellings(spelled: Any, seconds: float) -> None:
    assert duration_seconds(spelled) == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize(
    ("spelled", "kind"),
    [
        ("5ss", "syntax"),
        ("1s1s", "syntax"),  # a unit repeats
        ("30s1m", "syntax"),  # smallest first
        ("1m30", "syntax"),  # a number without its unit after a unit
        ("s", "syntax"),
        ("", "syntax"),
        ("fast", "syntax"),
        ("1_0", "syntax"),  # float() takes it; a duration does not
        ("\uff15s", "syntax"),  # a full-width 5
        ("1.5e2s", "syntax"),  # an exponent only on a bare number
        ("1 2", "syntax"),
        (True, "syntax"),
        (None, "syntax"),
        ([1], "syntax"),
        ("nan", "non_finite"),
        ("inf", "non_finite"),
        ("-Infinity", "non_finite"),
        (math.nan, "non_finite"),
        (math.inf, "non_finite"),
        (10**400, "non_finite"),
        ("1" * 400, "non_finite"),
        ("9" * 320 + "w", "non_finite"),
        ("-1", "negative"),
        ("-500ms", "negative"),
        (-0.5, "negative"),
    ],
)
def test_refused_spellings(spelled: Any, kind: str) -> None:
    with pytest.raises(DurationError) as err:
        duration_seconds(spelled)
    assert err.value.kind == kind
    assert "\n" not in str(err.value)


def test_serve_settings_read_the_grammar() -> None:
    """positive_seconds (every serve interval and timeout) is the grammar above 0, one message for the rest."""
    assert positive_seconds("1m30s") == 90.0 and positive_seconds("250ms") == 0.25
    for bad in ("5ss", "0", "-1s", "nan", "inf"):
        with pytest.raises(ValueError, match=r"^expected a positive number of seconds or a duration such as 500ms"):
            positive_seconds(bad)


@pytest.mark.parametrize(
    ("value", "positive", "message"),
    [
        ("5ss", True, "--slo-ttft: expected a duration such as 500ms, 2s or 1m30s, got '5ss'"),
        ("nan", True, "--slo-ttft: expected a duration such as 500ms, 2s or 1m30s, got 'nan'"),
        ("0ms", True, "--slo-ttft: expected a positive duration, got '0ms'"),
        ("-1s", True, "--slo-ttft: expected a positive duration, got '-1s'"),
        ("-1s", False, "--slo-ttft: expected a duration of 0 or more, got '-1s'"),
    ],
)
def test_command_flags_get_one_line_naming_the_flag(value: str, positive: bool, message: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_duration(value, "--slo-ttft", positive=positive)
    assert str(err.value) == message


def test_command_flags_accept_every_spelling() -> None:
    assert parse_duration("500ms", "--slo-ttft") == 0.5
    assert parse_duration("1h30m", "--budget") == 5400.0
    assert parse_duration("0", "--warmup", positive=False) == 0.0


def test_argparse_flags_name_the_flag_and_what_was_expected() -> None:
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--step-seconds", type=seconds_type())
    parser.add_argument("--warmup-seconds", type=seconds_type(positive=False))
    args = parser.parse_args(["--step-seconds", "1m30s", "--warmup-seconds", "0"])
    assert (args.step_seconds, args.warmup_seconds) == (90.0, 0.0)
    for flag, value, message in (
        ("--step-seconds", "0", "expected a positive number of seconds, got '0'"),
        ("--step-seconds", "5ss", "expected a number of seconds or a duration such as 500ms"),
        ("--step-seconds", "inf", "expected a finite number of seconds"),
        ("--warmup-seconds", "-1", "expected 0 or a positive number of seconds, got '-1'"),
    ):
        with pytest.raises(argparse.ArgumentError, match=f"argument {flag}: {message}"):
            parser.parse_args([flag, value])


# --------------------------------------------------------------------------- the config file


def _config(tmp_path: Path, text: str, *flags: str, env: dict[str, str] | None = None) -> Any:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return load_config(parser.parse_args(["--config", str(path), *flags]), environ=env or {})


def test_a_config_file_duration_accepts_500ms(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "gpu_interval: 1m30s\nengine_interval: 500ms\ndiagnosis:\n  slo_ttft_p95_seconds: 500ms\n")
    assert (cfg.gpu_interval, cfg.engine_interval) == (90.0, 0.5)
    assert Thresholds.from_mapping(cfg.diagnosis).slo_ttft_p95_seconds == 0.5


def test_the_environment_and_flags_read_the_same_grammar(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "{}\n", "--gpu-interval", "1500ms", env={"LLM_EXPORTER_ENGINE_INTERVAL": "1m"})
    assert (cfg.gpu_interval, cfg.engine_interval) == (1.5, 60.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu_interval: 5ss\n", "gpu_interval: expected a positive number of seconds or a duration such as 500ms"),
        ("engine_interval: -2s\n", "engine_interval: expected a positive number of seconds"),
        (
            "diagnosis:\n  slo_ttft_p95_seconds: 5ss\n",
            "diagnosis.slo_ttft_p95_seconds: expected a number of seconds or a duration",
        ),
    ],
)
def test_a_bad_config_file_duration_is_one_line_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(UsageError) as err:
        _config(tmp_path, text)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("500ms", 0.5), ("2s", 2.0), ("1m30s", 90.0), ("0.3", 0.3), (2, 2.0)],
)
def test_diagnosis_seconds_keys_read_the_grammar(raw: Any, seconds: float) -> None:
    assert Thresholds.from_mapping({"slo_ttft_p95_seconds": raw}).slo_ttft_p95_seconds == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"slo_ttft_p95_seconds": "5ss"}, "diagnosis.slo_ttft_p95_seconds: expected a number of seconds or a duration"),
        ({"window_seconds": "nan"}, "diagnosis.window_seconds: expected a finite number"),
        ({"recent_seconds": "-5s"}, "diagnosis.recent_seconds: expected 0 or a positive number of seconds"),
        ({"slo_itl_p95_seconds": "0ms"}, "diagnosis.slo_itl_p95_seconds: expected a positive number"),
        # a key that is no duration takes no unit (the old reader stripped any "s" off every key)
        ({"busy_utilization": "0.9s"}, "diagnosis.busy_utilization: expected a number"),
    ],
)
def test_diagnosis_refuses_what_is_no_duration(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as err:
        Thresholds.from_mapping(raw)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_source_gap_seconds_keeps_its_zero() -> None:
    """0 turns the gap hold off: the grammar allows 0, each key keeps its own range."""
    assert Thresholds.from_mapping({"source_gap_seconds": "0s"}).source_gap_seconds == 0.0
