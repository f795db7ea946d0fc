"""The ``probe:`` setting, the ``--probe`` / ``--probe-url`` flags, and the wiring into ``serve``.

Proven here: the accepted forms and their defaults; every bad value stops start-up
with one line naming the key (and a password in a URL is never echoed); ``--probe``
turns the probe on for a single engine and refuses to guess among several; ``serve``
builds one ``ProbeSource`` per probed engine, and none without a probe.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from exporter.commands.serve import build_sources
from exporter.config import add_serve_arguments, load_config
from exporter.errors import UsageError
from exporter.probe.config import DEFAULT_PROMPT, ProbeConfig, parse_probe
from exporter.probe.source import ProbeSource
from exporter.store import SnapshotStore


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    return p.parse_args(list(argv))


def test_forms_and_defaults() -> None:
    assert parse_probe(None, "p") is None and parse_probe(False, "p") is None and parse_probe("off", "p") is None
    assert parse_probe(True, "p") == ProbeConfig()
    d = ProbeConfig()
    assert (d.interval, d.timeout, d.model, d.prompt, d.max_tokens, d.api, d.url) == (
        15.0,
        10.0,
        "auto",
        DEFAULT_PROMPT,
        8,
        "completions",
        None,
    )
    got = parse_probe(
        {
            "interval": "30s",
            "timeout": "5s",
            "model": "m",
            "prompt": "Hi",
            "max_tokens": 4,
            "api": "chat",
            "url": "http://gw:8000/v1/",
        },
        "p",
    )
    assert got == ProbeConfig(30.0, 5.0, "m", "Hi", 4, "chat", "http://gw:8000")
    # a short interval without a timeout gets one below it
    short = parse_probe({"interval": 2}, "p")
    assert short is not None and short.timeout == pytest.approx(1.8)


@pytest.mark.parametrize(
    "value, where",
    [
        ({"intervall": 5}, "unknown setting(s) intervall"),
        ({"interval": 10, "timeout": 10}, "p.timeout"),
        ({"interval": 0.5}, "p.interval"),
        ({"max_tokens": 1000}, "p.max_tokens"),
        ({"max_tokens": 0}, "p.max_tokens"),
        ({"api": "responses"}, "p.api"),
        ({"prompt": ""}, "p.prompt"),
        ({"url": "ftp://x"}, "p.url"),
        ({"url": "http://gw:1/?a=b"}, "p.url"),
        ({"bearer_token_file": "/nonexistent/token"}, "p.bearer_token_file"),
        ([1, 2], "p: expected true, false or a mapping"),
    ],
)
def test_bad_values_name_the_key(value: object, where: str) -> None:
    with pytest.raises(UsageError, match=None) as err:
        parse_probe(value, "p")
    assert where in str(err.value)


def test_a_password_in_the_probe_url_is_refused_and_never_echoed() -> None:
    with pytest.raises(UsageError) as err:
        parse_probe({"url": "http://user:hunter2@gw:8000"}, "p")
    assert "hunter2" not in str(err.value) and "bearer_token_file" in str(err.value)


def test_probe_in_the_config_file(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(
        "engines:\n"
        "  - url: http://127.0.0.1:8000\n"
        "    name: a\n"
        "    probe: {interval: 15s, model: auto, prompt: 'Say OK.', max_tokens: 8, timeout: 10s}\n"
        "  - url: http://127.0.0.1:8001\n"
        "    name: b\n"
    )
    cfg = load_config(_args("--config", str(f)), environ={})
    assert cfg.engines[0].probe == ProbeConfig(15.0, 10.0, "auto", "Say OK.", 8)
    assert cfg.engines[1].probe is None
    f.write_text("engines:\n  - url: http://127.0.0.1:8000\n    probe: {max_tokens: 9000}\n")
    with pytest.raises(UsageError, match=r"engines\[0\]: probe.max_tokens"):
        load_config(_args("--config", str(f)), environ={})


def test_probe_flag_for_a_single_engine() -> None:
    cfg = load_config(_args("--engine", "http://127.0.0.1:8000", "--probe"), environ={})
    assert cfg.engines[0].probe == ProbeConfig()
    cfg = load_config(_args("--engine", "http://127.0.0.1:8000", "--probe-url", "http://127.0.0.1:9000"), environ={})
    assert cfg.engines[0].probe == ProbeConfig(url="http://127.0.0.1:9000")
    cfg = load_config(_args("--engine", "http://127.0.0.1:8000"), environ={"LLM_EXPORTER_PROBE": "true"})
    assert cfg.engines[0].probe == ProbeConfig()
    assert load_config(_args("--engine", "http://127.0.0.1:8000"), environ={}).engines[0].probe is None


@pytest.mark.parametrize("engines", [[], ["http://127.0.0.1:8000", "http://127.0.0.1:8001"]])
def test_probe_flag_refuses_to_guess_the_engine(engines: list[str]) -> None:
    argv = [a for url in engines for a in ("--engine", url)] + ["--probe"]
    with pytest.raises(UsageError, match="--probe: applies to a single engine"):
        load_config(_args(*argv), environ={})


def test_serve_builds_one_probe_source_per_probed_engine(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(
        "gpu_source: none\n"
        "engines:\n"
        "  - {url: 'http://127.0.0.1:8000', name: a, probe: true}\n"
        "  - {url: 'http://127.0.0.1:8001', name: b}\n"
    )
    sources, _ = build_sources(load_config(_args("--config", str(f)), environ={}), SnapshotStore())
    probes = [s for s in sources if isinstance(s, ProbeSource)]
    assert [p.name for p in probes] == ["probe:a"]
    assert probes[0].engine_source in {s.name for s in sources}
    f.write_text("gpu_source: none\nengines:\n  - {url: 'http://127.0.0.1:8000', name: a}\n")
    sources, _ = build_sources(load_config(_args("--config", str(f)), environ={}), SnapshotStore())
    assert not [s for s in sources if isinstance(s, ProbeSource)]
