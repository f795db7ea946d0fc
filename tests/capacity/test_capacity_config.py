"""--capacity-profile, --capacity-headroom, their environment variables and engines[].capacity_profile."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from exporter.capacity import build_capacity_steps
from exporter.config import Config, add_serve_arguments, load_config
from exporter.errors import UsageError
from tests.capacity.profiles import tune_doc, write

ENGINE = "http://127.0.0.1:9/metrics"
CAP = {"concurrency": 10, "requests_per_second": 2.0, "tokens_per_second": 200.0}


def _load(argv: list[str], env: dict[str, str] | None = None) -> Config:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return load_config(parser.parse_args(["--gpu-source", "none", *argv]), env or {})


def test_flag_environment_and_file_each_give_an_engine_its_profile(tmp_path: Path) -> None:
    profile = write(tmp_path / "tune.json", tune_doc(CAP))
    by_flag = _load(["--engine", ENGINE, "--capacity-profile", str(profile)])
    assert by_flag.capacity_profiles["127.0.0.1:9"].concurrency == 10 and by_flag.capacity_headroom == 0.2
    by_env = _load(["--engine", ENGINE], {"LLM_EXPORTER_CAPACITY_PROFILE": str(profile), "LLM_EXPORTER_CAPACITY_HEADROOM": "25%"})
    assert by_env.engines[0].capacity_profile == str(profile) and by_env.capacity_headroom == 0.25
    conf = tmp_path / "c.yaml"
    conf.write_text(
        f"capacity_headroom: 0.3\nengines:\n  - url: {ENGINE}\n    name: a\n    capacity_profile: {profile}\n  - url: http://127.0.0.1:8/metrics\n"
    )
    by_file = _load(["--config", str(conf)])
    assert set(by_file.capacity_profiles) == {"a"} and by_file.capacity_headroom == 0.3
    (source,) = build_capacity_steps(by_file.capacity_profiles, by_file.engines, by_file.capacity_headroom)
    assert source.name == "capacity_profile" and [e.name for e in source.engines] == ["a"] and source.headroom == 0.3
    bare = _load(["--engine", ENGINE])
    assert build_capacity_steps(bare.capacity_profiles, bare.engines, bare.capacity_headroom) == []


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--capacity-profile", "x.json"], {}, "--capacity-profile: needs an --engine to attach to"),
        (
            ["--engine", ENGINE, "--capacity-headroom", "1"],
            {},
            "--capacity-headroom: expected a ratio from 0 up to (not including) 1, got '1'",
        ),
        (
            ["--engine", ENGINE],
            {"LLM_EXPORTER_CAPACITY_HEADROOM": "-0.1"},
            "LLM_EXPORTER_CAPACITY_HEADROOM: expected a ratio from 0 up to",
        ),
        (
            ["--engine", ENGINE, "--capacity-profile", "/nonexistent/tune.json"],
            {},
            "--capacity-profile: capacity profile /nonexistent/tune.json: no such file",
        ),
        (
            ["--engine", ENGINE],
            {"LLM_EXPORTER_CAPACITY_PROFILE": "/nonexistent/r.json"},
            "LLM_EXPORTER_CAPACITY_PROFILE: capacity profile /nonexistent/r.json: no such file",
        ),
    ],
)
def test_bad_values_are_one_line_naming_the_setting(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(UsageError) as err:
        _load(argv, env)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_bad_profile_in_the_config_file_names_its_engine_entry(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    conf = tmp_path / "c.yaml"
    conf.write_text(f"engines:\n  - url: {ENGINE}\n    capacity_profile: {bad}\n")
    with pytest.raises(UsageError, match=r"^engines\[0\]\.capacity_profile: capacity profile .*bad.json: neither a tune.json"):
        _load(["--config", str(conf)])
    conf.write_text(f"engines:\n  - url: {ENGINE}\n    capacity_profile: 7\n")
    with pytest.raises(UsageError, match=r"engines\[0\]: capacity_profile: expected the path of a tune.json or ramp report.json"):
        _load(["--config", str(conf)])
