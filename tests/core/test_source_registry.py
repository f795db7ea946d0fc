"""The source registry (exporter/commands/registry.py): switches by name, listed in `serve --help`, set by
flag > environment > config file > default; a source that is off is never built; a source
that needs one that is off is one usage line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import build_parser
from exporter.commands import registry
from exporter.config import Config, load_config
from exporter.errors import UsageError
from exporter.kubernetes.settings import KubernetesConfig
from exporter.store import SnapshotStore

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "exporter" / "data" / "traces" / "serving.csv"
ENGINE = "http://127.0.0.1:9/metrics"


def _load(argv: list[str], env: dict[str, str] | None = None) -> Config:
    argv = ["serve", *argv]
    return load_config(build_parser(argv).parse_args(argv), environ=env or {})


def _names(cfg: Config) -> list[str]:
    from exporter.commands.serve import build_sources

    sources, _ = build_sources(cfg, SnapshotStore())
    try:
        # the derive stage counts as the derived sources it runs (exporter/derive.py)
        return [n for s in sources for n in getattr(s, "names", [s.name])]
    finally:
        for s in sources:
            s.close()


def test_the_registry_names_the_sources() -> None:
    assert set(registry.SOURCES) >= {"gpu", "engine", "process", "probe", "kubernetes", "diagnosis"}
    assert next(iter(registry.SOURCES)) == "diagnosis", "its section is validated before any GPU probe"
    assert list(registry.SOURCES).index("kubernetes") > list(registry.SOURCES).index("gpu"), "kubernetes wraps the GPU source"


def test_serve_help_lists_every_switch_with_its_default() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "exporter", "serve", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    for name in registry.SOURCES:
        assert f"--source.{name}, --no-source.{name}" in done.stdout, name
    assert done.stdout.count("(default on)") >= len([e for e in registry.SOURCES.values() if e.default])
    assert "LLM_EXPORTER_SOURCE_<NAME>" in done.stdout and "sources: {NAME: false}" in done.stdout


def test_defaults_flags_environment_and_file(tmp_path: Path) -> None:
    assert all(_load([]).sources[n] is e.default for n, e in registry.SOURCES.items())
    assert _load(["--no-source.gpu"]).sources["gpu"] is False
    cfg_file = tmp_path / "c.yml"
    cfg_file.write_text("sources:\n  gpu: false\n  process: off\n")
    cfg = _load(["--config", str(cfg_file)])
    assert (cfg.sources["gpu"], cfg.sources["process"], cfg.sources["engine"]) == (False, False, True)
    # environment over file, flag over environment
    assert _load(["--config", str(cfg_file)], {"LLM_EXPORTER_SOURCE_GPU": "true"}).sources["gpu"] is True
    assert _load(["--config", str(cfg_file), "--no-source.gpu"], {"LLM_EXPORTER_SOURCE_GPU": "true"}).sources["gpu"] is False
    assert _load(["--source.process", "--config", str(cfg_file)]).sources["process"] is True


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("sources:\n  gpus: false\n", {}, "sources: unknown source(s) gpus (known: diagnosis, gpu,"),
        ("sources:\n  gpu: maybe\n", {}, "sources.gpu: expected true or false, got 'maybe'"),
        ("sources: [gpu]\n", {}, "sources: expected a mapping of source name to true or false"),
        ("{}\n", {"LLM_EXPORTER_SOURCE_ENGINE": "nope"}, "LLM_EXPORTER_SOURCE_ENGINE: expected true or false, got 'nope'"),
    ],
)
def test_bad_switches_are_one_usage_line(tmp_path: Path, text: str, env: dict[str, str], message: str) -> None:
    cfg_file = tmp_path / "c.yml"
    cfg_file.write_text(text)
    with pytest.raises(UsageError) as err:
        _load(["--config", str(cfg_file)], env)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_source_that_is_off_is_never_built(monkeypatch: pytest.MonkeyPatch) -> None:
    import exporter.gpu

    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("the GPU source was built although it is off")

    assert "gpu" in _names(_load(["--gpu-source", f"replay:{TRACE}"]))
    monkeypatch.setattr(exporter.gpu, "build_gpu_source", refuse)
    assert "gpu" not in _names(_load(["--gpu-source", f"replay:{TRACE}", "--no-source.gpu"]))


def test_engine_off_keeps_the_process_sampler_and_diagnosis_off_drops_its_routes() -> None:
    argv = ["--gpu-source", "none", "--engine", ENGINE, "--engine-pid", "1"]
    assert _names(_load(argv)) == ["engine:127.0.0.1:9", "process:127.0.0.1:9", "parallel", "capacity", "diagnosis"]
    assert _names(_load([*argv, "--no-source.engine"])) == ["process:127.0.0.1:9", "parallel", "capacity", "diagnosis"]
    from exporter.commands.serve import build_sources

    sources, routers = build_sources(_load(["--gpu-source", "none", "--no-source.diagnosis"]), SnapshotStore())
    assert sources == [] and routers == []
    sources, routers = build_sources(_load(["--gpu-source", "none"]), SnapshotStore())
    assert [n for s in sources for n in getattr(s, "names", [])] == ["parallel", "capacity", "diagnosis"] and len(routers) == 1


def test_the_diagnosis_gets_its_section_not_the_whole_configuration() -> None:
    """serve's wiring hands the diagnosis what it reads (issue 24): the cycle as serve derives it, and
    the intervals of the inputs it has (no GPU interval without a GPU source)."""
    from exporter.diagnosis import input_intervals

    cfg = _load(["--gpu-interval", "0.5", "--engine", ENGINE, "--engine-pid", "1", "--parallel-group", "pp0"])
    settings = registry.diagnosis_settings(cfg)
    assert (settings.interval, settings.gpu_interval, settings.parallel_group) == (1.0, 0.5, "pp0")
    assert input_intervals(settings, cfg.engines) == [0.5, 5.0, 1.0]  # GPU, engine, process sampler
    bare = registry.diagnosis_settings(_load(["--gpu-source", "none", "--diagnosis-interval", "3"]))
    assert (bare.interval, bare.gpu_interval) == (3.0, None) and input_intervals(bare, []) == []


def test_probe_needs_engine() -> None:
    argv = ["--gpu-source", "none", "--engine", ENGINE, "--probe"]
    with pytest.raises(UsageError) as err:
        _load([*argv, "--no-source.engine"])
    assert str(err.value) == (
        "source probe needs source engine, which --no-source.engine turns off: "
        "turn probe off too (--no-source.probe) or engine on"
    )
    with pytest.raises(UsageError, match="which LLM_EXPORTER_SOURCE_ENGINE=0 turns off"):
        _load(argv, {"LLM_EXPORTER_SOURCE_ENGINE": "0"})
    # both off, or no probe asked for: fine
    assert _load([*argv, "--no-source.engine", "--no-source.probe"]).sources["probe"] is False
    assert _load(["--gpu-source", "none", "--engine", ENGINE, "--no-source.engine"]).sources["engine"] is False


def test_kubernetes_discovery_needs_engine_and_process() -> None:
    cfg = Config(kubernetes=KubernetesConfig(enabled=True, node_name="n"), sources={"engine": False})
    with pytest.raises(UsageError, match="source kubernetes needs source engine"):
        registry.check(cfg, {})
    cfg.sources = {"process": False}
    with pytest.raises(UsageError, match="source kubernetes needs source process"):
        registry.check(cfg, {})
    cfg.kubernetes = KubernetesConfig(enabled=True, node_name="n", process_sampler=False)
    registry.check(cfg, {})
    cfg.kubernetes = KubernetesConfig(enabled=True, node_name="n", discovery=False)
    cfg.sources = {"engine": False, "process": False}
    registry.check(cfg, {})  # attribution only: needs neither


def test_serve_exits_2_with_one_line_for_a_missing_need() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "exporter", "serve", "--gpu-source", "none", "--engine", ENGINE, "--probe", "--no-source.engine"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "llm-layer-exporter serve: error: source probe needs source engine, which "
        "--no-source.engine turns off: turn probe off too (--no-source.probe) or engine on"
    )
