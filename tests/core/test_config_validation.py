"""Bad config is one line: every value checked by type and range, exit 2, the key named, no traceback.

The first tests call load_config directly (fast, many cases); the last runs the real
CLI (`llm-layer-exporter serve ...` in a subprocess) for the mistakes that once ended
in a traceback or were silently accepted.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.config import Config, add_serve_arguments, load_config
from exporter.errors import UsageError
from tests.support.ports import free_port
from tests.tls import self_signed_cert

ROOT = Path(__file__).resolve().parents[2]


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    return p.parse_args(list(argv))


def _load_file(tmp_path: Path, text: str, *argv: str) -> Config:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    return load_config(_args("--config", str(f), *argv), environ={})


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--gpu-interval", "1e-9"], "--gpu-interval: expected 0.1 to 3600 seconds"),
        (["--gpu-interval", "0.05"], "--gpu-interval: expected 0.1 to 3600 seconds"),
        (["--gpu-interval", "1e12"], "--gpu-interval: expected 0.1 to 3600 seconds"),
        (["--gpu-interval", "inf"], "--gpu-interval: expected a positive number"),
        (["--engine-interval", "0.01"], "--engine-interval: expected 0.1 to 3600"),
        (["--process-interval", "0"], "--process-interval"),
        (["--diagnosis-interval", "0.001"], "--diagnosis-interval: expected 0.1 to 3600"),
        (["--gpu-timeout", "0.001"], "--gpu-timeout: expected 0.01 to 3600"),
        (["--gpu-timeout", "1"], "--gpu-timeout: 1 s must be less than --gpu-interval (default) 1 s"),
        (["--gpu-interval", "0.5", "--gpu-timeout", "2"], "--gpu-timeout: 2 s must be less than --gpu-interval 0.5 s"),
        (["--engine-interval", "2", "--engine-timeout", "3"], "--engine-timeout: 3 s must be less than --engine-interval 2 s"),
        (["--listen-address", "127.0.0.1:0"], "--listen-address: expected HOST:PORT with a port 1-65535"),
        (["--listen-address", "127.0.0.1:65536"], "--listen-address"),
        (["--listen-address", "127.0.0.1:http"], "--listen-address"),
        (["--engine", "http://a:1", "--engine-pid", "-3"], "--engine-pid: expected a positive integer"),
        (["--engine", "http://a:1", "--engine-pid", "1.5"], "--engine-pid: expected a positive integer"),
        (["--gpu-source", ""], "--gpu-source"),
    ],
)
def test_flags_out_of_range_name_the_flag(argv: list[str], needle: str) -> None:
    with pytest.raises(UsageError) as err:
        load_config(_args(*argv), environ={})
    assert needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("engines:\n  - url: 5\n", "engines[0]: url: expected an http(s) URL string, got 5"),
        ("engines:\n  - url: [http://a:1]\n", "engines[0]: url: expected an http(s) URL string"),
        ("engines:\n  - url: http://a:1\n    name: 5\n", "engines[0]: name: expected a non-empty string"),
        ("engines:\n  - url: http://a:1\n    type: [vllm]\n", "engines[0]: type: expected one of"),
        ("engines:\n  - url: http://a:1\n    interval: 0.01\n", "engines[0]: interval: expected 0.1 to 3600"),
        (
            "engines:\n  - url: http://a:1\n    interval: 2\n    timeout: 2\n",
            "engines[0]: timeout 2 s must be less than its interval 2 s",
        ),
        ("engines:\n  - url: http://a:1\n    timeout: true\n", "engines[0]: timeout: expected a positive number"),
        ("engines:\n  - url: http://a:1\n    max_series: 1.5\n", "engines[0]: max_series: expected a positive integer"),
        ("engines:\n  - url: http://a:1\n    max_series: true\n", "engines[0]: max_series: expected a positive integer"),
        ("engines:\n  - url: http://a:1\n    max_body_bytes: 10\n", "engines[0]: max_body_bytes: expected 1024 to"),
        ("engines:\n  - url: http://a:1\n    pid: true\n", "engines[0]: pid: expected a positive integer"),
        ("engines:\n  - url: http://a:1\n    process: [vllm]\n", "engines[0]: process: expected a non-empty string"),
        ("engines:\n  - url: http://a:1\n    tls_verify: maybe\n", "engines[0]: tls_verify: expected true or false"),
        ("engines:\n  - url: http://a:1\n    ca_bundle: /nope.pem\n", "engines[0]: ca_bundle: cannot read /nope.pem"),
        ("engines:\n  - url: http://a:1\n    bearer_token_file: {tmp}\n", "engines[0]: bearer_token_file: {tmp} is a directory"),
        ("engines:\n  - 5\n", "engines[0]: expected a mapping with a url"),
        ("engines:\n  url: http://a:1\n", "engines: expected a list"),
        ("engine_interval: 1\nengines:\n  - url: http://a:1\n    interval: 0.5\n", ""),  # valid: derived timeout 0.45
        (
            "engine_timeout: 3\nengines:\n  - url: http://a:1\n    interval: 1\n",
            "engines[0]: timeout 3 s must be less than its interval 1 s",
        ),
        ("listen_address: 9750\n", ": listen_address: expected a non-empty string, got 9750"),
        ("gpu_interval: [1]\n", ": gpu_interval: expected a positive number"),
        ("gpu_interval: true\n", ": gpu_interval: expected a positive number"),
        ("gpu_source: 5\n", ": gpu_source: expected a non-empty string"),
        ("web_config_file: 5\n", ": web_config_file: expected a non-empty string"),
        ("log_level: 3\n", ": log_level: expected a non-empty string"),
        ("groups:\n  tp0: [true]\n", "groups.tp0: expected a non-empty list of GPU indexes"),
        ("diagnosis: [1]\n", "diagnosis: expected a mapping"),
    ],
)
def test_config_file_values_are_checked_by_type_and_range(tmp_path: Path, text: str, needle: str) -> None:
    text, needle = text.format(tmp=tmp_path), needle.format(tmp=tmp_path)
    if not needle:
        cfg = _load_file(tmp_path, text)
        assert cfg.engines[0].timeout == pytest.approx(0.45)
        return
    with pytest.raises(UsageError) as err:
        _load_file(tmp_path, text)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_unset_timeouts_follow_their_interval() -> None:
    """A timeout nobody set is 0.9 x its interval, at most the old default: short intervals just work."""
    cfg = load_config(_args("--gpu-interval", "0.2", "--engine-interval", "1", "--engine", "http://a:1"), environ={})
    assert cfg.gpu_timeout == pytest.approx(0.18) and cfg.engine_timeout == pytest.approx(0.9)
    assert cfg.engines[0].timeout == pytest.approx(0.9) and cfg.engines[0].interval == 1.0
    default = load_config(_args("--engine", "http://a:1"), environ={})
    assert default.gpu_timeout == pytest.approx(0.9) and default.engines[0].timeout == 3.0
    slow = load_config(_args("--gpu-interval", "30"), environ={})
    assert slow.gpu_timeout == 2.0
    explicit = load_config(_args("--gpu-interval", "2", "--gpu-timeout", "1.5"), environ={})
    assert explicit.gpu_timeout == 1.5 and "gpu_timeout" in explicit.explicit


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("llm-layer-exporter")
    return [str(script)] if script.exists() else [sys.executable, "-m", "exporter"]


def _cli_cases(tmp: Path) -> list[tuple[str, list[str], str]]:
    cert, key = self_signed_cert(tmp)
    files = {
        "url5.yaml": "engines:\n  - url: 5\n",
        "timeout.yaml": "engines:\n  - url: http://127.0.0.1:9\n    interval: 1\n    timeout: 5\n",
        "web-key-is-cert.yml": f"tls_server_config:\n  cert_file: {cert}\n  key_file: {cert}\n",
        "web-missing.yml": f"tls_server_config:\n  cert_file: {cert}\n  key_file: {tmp}/missing.key\n",
        "web-tls10.yml": f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  min_version: TLS10\n",
        "web-any.yml": f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  client_auth_type: RequireAnyClientCert\n  client_ca_file: {cert}\n",
        "web-users.yml": "basic_auth_users: [prometheus]\n",
    }
    for name, text in files.items():
        (tmp / name).write_text(text)
    return [
        ("tiny interval", ["--gpu-interval", "1e-9"], "--gpu-interval: expected 0.1 to 3600 seconds, got '1e-9'"),
        (
            "timeout over interval",
            ["--gpu-interval", "1", "--gpu-timeout", "2"],
            "--gpu-timeout: 2 s must be less than --gpu-interval 1 s",
        ),
        (
            "engine timeout over interval",
            ["--config", str(tmp / "timeout.yaml")],
            "engines[0]: timeout 5 s must be less than its interval 1 s",
        ),
        (
            "port out of range",
            ["--listen-address", "127.0.0.1:99999"],
            "--listen-address: expected HOST:PORT with a port 1-65535",
        ),
        ("url is a number", ["--config", str(tmp / "url5.yaml")], "engines[0]: url: expected an http(s) URL string, got 5"),
        ("missing config", ["--config", str(tmp / "nope.yaml")], f"--config: cannot read {tmp}/nope.yaml"),
        (
            "certificate as key_file",
            ["--web-config-file", str(tmp / "web-key-is-cert.yml")],
            f"--web-config-file: {tmp}/web-key-is-cert.yml: tls_server_config.key_file: {cert} holds no PEM private key (it is a certificate",
        ),
        ("missing key_file", ["--web-config-file", str(tmp / "web-missing.yml")], "tls_server_config.key_file: file"),
        ("missing web config", ["--web-config-file", str(tmp / "nope.yml")], "--web-config-file: cannot read"),
        ("TLS 1.0", ["--web-config-file", str(tmp / "web-tls10.yml")], "tls_server_config.min_version: TLS10 is refused"),
        (
            "unverified client certs",
            ["--web-config-file", str(tmp / "web-any.yml")],
            "client_auth_type: RequireAnyClientCert is refused",
        ),
        ("users not a mapping", ["--web-config-file", str(tmp / "web-users.yml")], "basic_auth_users: expected a mapping"),
    ]


def test_cli_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    port = free_port()
    failures = []
    for label, argv, needle in _cli_cases(tmp_path):
        cmd = [*_cli(), "serve", "--gpu-source", "none", "--listen-address", f"127.0.0.1:{port}", *argv]
        if "--listen-address" in argv:
            cmd = [*_cli(), "serve", "--gpu-source", "none", *argv]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=60)
        lines = out.stderr.strip().splitlines()
        ok = (
            out.returncode == 2
            and len(lines) == 1
            and lines[0].startswith("llm-layer-exporter serve: error: ")
            and needle in lines[0]
            and "Traceback" not in out.stdout + out.stderr
        )
        if not ok:
            failures.append(f"{label}: rc={out.returncode} stderr={out.stderr[-600:]!r}")
    assert not failures, "\n".join(failures)
