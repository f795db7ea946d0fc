"""The HTTP face on a real uvicorn server: exposition, negotiation, health, auth, TLS."""

import shutil
import ssl
import subprocess
from pathlib import Path

import bcrypt
import pytest
import requests

from exporter.samples import HistogramSample, Sample
from exporter.server import create_app
from exporter.store import SnapshotStore
from exporter.webconfig import load_web_config
from tests.support.asgi import UvicornThread
from tests.tls import self_signed_cert


def _store() -> SnapshotStore:
    store = SnapshotStore()
    store.register("gpu", 1.0)
    store.register("engine:a", 5.0)
    store.record_success(
        "gpu",
        [
            Sample("llm_gpu_info", {"gpu": "0", "uuid": "GPU-1", "name": 'H200 "SXM"', "source": "replay"}, 1),
            Sample("llm_gpu_sm_active_ratio", {"gpu": "0", "uuid": "GPU-1"}, 0.92),
            Sample("llm_gpu_energy_joules_total", {"gpu": "0", "uuid": "GPU-1"}, 1234.5),
            Sample("llm_gpu_throttle_reason_active", {"gpu": "0", "uuid": "GPU-1", "reason": "sw_power_cap"}, 1),
        ],
        0.001,
    )
    store.record_success(
        "engine:a",
        [
            HistogramSample(
                "llm_request_ttft_seconds",
                {"server": "a", "engine": "vllm", "model": "m", "rank": "0"},
                ((0.05, 2.0), (0.5, 7.0), (float("inf"), 9.0)),
                3.25,
                9.0,
            ),
            Sample("llm_prompt_tokens_total", {"server": "a", "engine": "vllm", "model": "m", "rank": "0"}, 900),
        ],
        0.01,
    )
    return store


def test_metrics_text_passes_promtool_and_carries_values(tmp_path: Path) -> None:
    with UvicornThread(create_app(_store())) as srv:
        r = requests.get(f"http://127.0.0.1:{srv.port}/metrics", timeout=5)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = r.text
    assert 'llm_gpu_sm_active_ratio{gpu="0",uuid="GPU-1"} 0.92' in text
    assert 'llm_request_ttft_seconds_bucket{engine="vllm",le="0.5",model="m",rank="0",server="a"} 7.0' in text
    assert 'llm_exporter_source_up{source="engine:a"} 1.0' in text
    assert 'name="H200 \\"SXM\\""' in text
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is required"
    res = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip() == "" and res.stderr.strip() == "", res.stdout + res.stderr


def test_openmetrics_only_when_asked() -> None:
    with UvicornThread(create_app(_store())) as srv:
        url = f"http://127.0.0.1:{srv.port}/metrics"
        om = requests.get(url, headers={"Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"}, timeout=5)
        plain = requests.get(url, headers={"Accept": "text/plain"}, timeout=5)
    assert om.headers["content-type"].startswith("application/openmetrics-text")
    assert om.text.rstrip().endswith("# EOF")
    assert "# UNIT llm_gpu_sm_active_ratio ratio" in om.text
    assert "# EOF" not in plain.text


def test_health_and_readiness() -> None:
    store = SnapshotStore()
    store.register("gpu", 1.0)
    with UvicornThread(create_app(store)) as srv:
        base = f"http://127.0.0.1:{srv.port}"
        assert requests.get(base + "/healthz", timeout=5).status_code == 200
        assert requests.get(base + "/readyz", timeout=5).status_code == 503
        store.record_success("gpu", [], 0.0)
        assert requests.get(base + "/readyz", timeout=5).status_code == 200


def test_tls_and_basic_auth_from_web_config(tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    hashed = bcrypt.hashpw(b"hunter2", bcrypt.gensalt(rounds=4)).decode().replace("$2b$", "$2y$", 1)
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\nbasic_auth_users:\n  prom: '{hashed}'\n")
    cfg = load_web_config(str(web))
    assert cfg.tls is not None
    with UvicornThread(create_app(_store(), web_config=cfg), **cfg.tls.uvicorn_kwargs()) as srv:
        url = f"https://127.0.0.1:{srv.port}/metrics"
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(url, timeout=5)  # self-signed: refused without the CA
        assert requests.get(url, verify=str(cert), timeout=5).status_code == 401
        assert requests.get(url, verify=str(cert), auth=("prom", "wrong"), timeout=5).status_code == 401
        assert requests.get(url, verify=str(cert), auth=("nobody", "hunter2"), timeout=5).status_code == 401
        ok = requests.get(url, verify=str(cert), auth=("prom", "hunter2"), timeout=5)
        assert ok.status_code == 200 and "llm_gpu_sm_active_ratio" in ok.text
        # probes stay open so a kubelet needs no credentials
        assert requests.get(f"https://127.0.0.1:{srv.port}/healthz", verify=str(cert), timeout=5).status_code == 200
    ctx = ssl.create_default_context(cafile=str(cert))
    assert ctx  # the CA file we served with is a valid trust anchor


@pytest.mark.parametrize(
    "text, needle",
    [
        ("tls_server_config:\n  cert_file: /nope\n  key_file: /nope\n", "cert_file"),
        ("basic_auth_users:\n  a: plaintext\n", "bcrypt hash"),
        ("http_server_config:\n  http2: true\n", "unsupported key"),
        ("tls_server_config:\n  curve_preferences: [X25519]\n", "unsupported key"),
    ],
)
def test_bad_web_config_is_a_clear_error(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "web.yml"
    f.write_text(text)
    with pytest.raises(ValueError) as err:
        load_web_config(str(f))
    assert needle in str(err.value)
