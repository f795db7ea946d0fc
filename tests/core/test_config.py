import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.config import add_serve_arguments, load_config
from exporter.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    return p.parse_args(list(argv))


def test_defaults() -> None:
    cfg = load_config(_args(), environ={})
    assert cfg.listen_address == "0.0.0.0:9750" and cfg.port == 9750
    assert cfg.gpu_source == "auto" and cfg.gpu_interval == 1.0 and cfg.engine_interval == 5.0
    assert cfg.engines == []


def test_flag_beats_env_beats_file(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("gpu_interval: 3\nengine-interval: 7\nlisten_address: 127.0.0.1:1\n")
    env = {"LLM_EXPORTER_GPU_INTERVAL": "2", "LLM_EXPORTER_LISTEN_ADDRESS": "127.0.0.1:2"}
    cfg = load_config(_args("--config", str(f), "--listen-address", "127.0.0.1:3"), environ=env)
    assert cfg.gpu_interval == 2.0  # env over file
    assert cfg.engine_interval == 7.0  # file over default
    assert cfg.listen_address == "127.0.0.1:3"  # flag over env


def test_engines_from_file_flags_and_env(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    f = tmp_path / "c.yaml"
    f.write_text(
        f"engine_interval: 2\nengines:\n  - url: http://10.0.0.1:8000\n    name: a\n    type: vllm\n    bearer_token_file: {token}\n    timeout: 1\n"
        "groups:\n  tp0: [0, 1]\n"
    )
    cfg = load_config(_args("--config", str(f), "--engine", "http://127.0.0.1:9/custom", "--engine-pid", "42"), environ={})
    a, b = cfg.engines
    assert (a.url, a.name, a.type, a.timeout, a.interval) == ("http://10.0.0.1:8000/metrics", "a", "vllm", 1.0, 2.0)
    assert a.bearer_token_file == str(token) and a.pid == 42
    assert (b.url, b.name) == ("http://127.0.0.1:9/custom", "127.0.0.1:9")
    assert cfg.groups == {"tp0": [0, 1]}
    env_cfg = load_config(_args(), environ={"LLM_EXPORTER_ENGINE": "http://h1:1,http://h2:2"})
    assert [e.name for e in env_cfg.engines] == ["h1:1", "h2:2"]


@pytest.mark.parametrize(
    "argv, env, needle",
    [
        (["--gpu-interval", "0"], {}, "--gpu-interval"),
        (["--gpu-interval", "nan"], {}, "--gpu-interval"),
        (["--listen-address", "9750"], {}, "--listen-address"),
        (["--gpu-source", "replay:"], {}, "--gpu-source"),
        (["--engine", "not a url"], {}, "--engine"),
        (["--log-level", "loud"], {}, "--log-level"),
        ([], {"LLM_EXPORTER_ENGINE_INTERVAL": "soon"}, "LLM_EXPORTER_ENGINE_INTERVAL"),
        (["--engine-pid", "12"], {}, "--engine-pid"),
        (["--config", "/nonexistent.yaml"], {}, "cannot read"),
    ],
)
def test_bad_values_name_the_setting(argv: list[str], env: dict[str, str], needle: str) -> None:
    with pytest.raises(UsageError) as err:
        load_config(_args(*argv), environ=env)
    assert needle in str(err.value)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("gpu_intervall: 1\n", "unknown setting(s) gpu_intervall"),
        ("engines:\n  - url: http://a:1\n    type: ollama\n", "type: expected one of"),
        ("engines:\n  - url: http://a:1\n  - url: http://a:1\n", "duplicate name"),
        ("engines:\n  - url: http://a:1\n    bearer_token_file: /nope\n", "bearer_token_file"),
        ("groups:\n  tp0: [a]\n", "groups.tp0"),
        ("[1, 2]\n", "mapping at the top level"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_bad_config_files(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(UsageError) as err:
        load_config(_args("--config", str(f)), environ={})
    assert needle in str(err.value)


def test_cli_exits_2_with_one_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "exporter", "serve", "--gpu-interval", "-5"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "--gpu-interval" in lines[0]
