"""The engine-hardening settings: `--engine-max-series`, per-engine `max_series`, `follow_redirects`."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from exporter.config import add_serve_arguments, load_config
from exporter.engines.config import DEFAULT_MAX_SERIES
from exporter.errors import UsageError


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    return p.parse_args(["--gpu-source", "none", *argv])


def _file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "exporter.yaml"
    path.write_text(text)
    return str(path)


def test_engine_max_series_defaults_and_sources(tmp_path: Path) -> None:
    url = "http://127.0.0.1:1/metrics"
    assert load_config(_args("--engine", url), environ={}).engines[0].max_series == DEFAULT_MAX_SERIES == 20_000
    assert load_config(_args("--engine", url, "--engine-max-series", "500"), environ={}).engines[0].max_series == 500
    env = {"LLM_EXPORTER_ENGINE_MAX_SERIES": "700"}
    assert load_config(_args("--engine", url), environ=env).engines[0].max_series == 700
    config = _file(
        tmp_path,
        f"engine_max_series: 900\nengines:\n  - {{url: '{url}', name: a}}\n  - {{url: '{url}', name: b, max_series: 50}}\n",
    )
    cfg = load_config(_args("--config", config), environ={})
    assert cfg.engine_max_series == 900
    assert [e.max_series for e in cfg.engines] == [900, 50]  # an engine's own max_series wins


def test_follow_redirects_is_off_unless_set(tmp_path: Path) -> None:
    config = _file(
        tmp_path, "engines:\n  - {url: 'http://h:1/', name: a}\n  - {url: 'http://h:2/', name: b, follow_redirects: true}\n"
    )
    assert [e.follow_redirects for e in load_config(_args("--config", config), environ={}).engines] == [False, True]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("engine_max_series: 0\n", "engine_max_series"),
        ("engine_max_series: lots\n", "engine_max_series"),
        ("engines:\n  - {url: 'http://h:1/', max_series: -5}\n", "engines[0]: max_series"),
        ("engines:\n  - {url: 'http://h:1/', max_series: 2.5}\n", "engines[0]: max_series"),
        ("engines:\n  - {url: 'http://h:1/', follow_redirects: 5}\n", "engines[0]: follow_redirects"),
        ("engines:\n  - {url: 'http://h:1/', basic_auth: yes-please}\n", "engines[0]: basic_auth"),
    ],
)
def test_bad_values_are_one_line_errors_naming_the_key(tmp_path: Path, text: str, where: str) -> None:
    with pytest.raises(UsageError) as caught:
        load_config(_args("--config", _file(tmp_path, text)), environ={})
    message = str(caught.value)
    assert where in message and "\n" not in message


def test_the_flag_rejects_a_bad_budget() -> None:
    with pytest.raises(UsageError) as caught:
        load_config(_args("--engine-max-series", "none"), environ={})
    assert str(caught.value).startswith("--engine-max-series: ")
