"""EngineSource against real local HTTP servers: success, every fault, secrets, TLS."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import pytest

from exporter.engines.config import EngineConfig
from exporter.engines.source import EngineSource, safe_url
from exporter.runner import SourceRunner
from exporter.samples import Sample, SourceError
from exporter.store import SnapshotStore
from tests.engines.engine_helpers import fixture
from tests.support.fake_engine import FakeEngine, closing_server
from tests.support.ports import closed_port_url
from tests.tls import self_signed_cert

VLLM = fixture("vllm-0.33-v1-2dp.prom").encode()
TOKEN = "s3cr3t-Token_value.42"


def make_source(url: str, **overrides: object) -> EngineSource:
    cfg = EngineConfig(url=url, name="eng1", timeout=2.0, interval=5.0)
    for key, val in overrides.items():
        setattr(cfg, key, val)
    return EngineSource(cfg)


def failure(source: EngineSource) -> SourceError:
    with pytest.raises(SourceError) as caught:
        source.sample()
    return caught.value


def test_scrape_normalises_and_names_the_source() -> None:
    with FakeEngine(VLLM) as srv:
        source = make_source(srv.url)
        try:
            result = source.sample()
        finally:
            source.close()
    assert (source.name, source.interval, source.timeout) == ("engine:eng1", 5.0, 2.0)
    assert (source.family, source.generation) == ("vllm", "v1")
    running = sorted(p.value for p in result.points if p.name == "llm_scheduler_requests_running" and isinstance(p, Sample))
    assert running == [3.0, 5.0]
    engine_points = [p for p in result.points if not p.name.startswith("llm_exporter_")]
    assert all(p.labels["server"] == "eng1" and p.labels["engine"] == "vllm" for p in engine_points)
    dropped = {
        p.labels["reason"]: p.value
        for p in result.points
        if p.name == "llm_exporter_series_dropped_total" and isinstance(p, Sample)
    }
    assert dropped == {"budget": 0.0, "label_too_long": 0.0, "bad_histogram": 0.0}
    assert result.partial_errors == []
    assert srv.seen_headers[0]["Accept"].startswith("text/plain")
    assert "Authorization" not in srv.seen_headers[0]


def test_engine_down_closed_port() -> None:
    err = failure(make_source(closed_port_url()))
    assert err.reason == "connection" and "connection refused" in err.message


def test_engine_refusing_to_answer() -> None:
    with closing_server() as srv:
        err = failure(make_source(srv.url))
    assert err.reason == "connection"


def test_engine_slow_past_its_timeout() -> None:
    with FakeEngine(VLLM, delay=3.0) as srv:
        err = failure(make_source(srv.url, timeout=0.3))
    assert err.reason == "timeout"


def test_body_trickling_past_the_timeout() -> None:
    with FakeEngine(VLLM, trickle_gap=0.1) as srv:
        err = failure(make_source(srv.url, timeout=0.35))
    assert err.reason == "timeout"


@pytest.mark.parametrize(("status", "hint"), [(500, ""), (503, ""), (404, "/prometheus/metrics"), (401, "bearer_token_file")])
def test_http_error_status(status: int, hint: str) -> None:
    with FakeEngine(b"error page\n", status=status) as srv:
        err = failure(make_source(srv.url))
    assert err.reason == "http_status" and f"HTTP {status}" in err.message and hint in err.message


def test_llamacpp_without_metrics_flag_says_how_to_fix_it() -> None:
    with FakeEngine(b'{"error":{"code":501}}', status=501) as srv:
        err = failure(make_source(srv.url, type="llamacpp"))
    assert err.reason == "http_status" and "--metrics" in err.message


@pytest.mark.parametrize(
    "body",
    [
        b"<!DOCTYPE html>\n<html><body>Welcome to nginx!</body></html>\n",
        bytes(range(256)) * 4,  # not UTF-8
        b"\x1f\x8b\x08\x00garbage",  # gzip magic without gzip framing
        b"process_cpu_seconds_total 1\n",  # valid text, but no engine
    ],
)
def test_garbage_is_a_parse_error(body: bytes) -> None:
    with FakeEngine(body) as srv:
        err = failure(make_source(srv.url))
    assert err.reason == "parse"


def test_truncated_body_is_a_parse_error_with_a_line_number() -> None:
    cut = VLLM[: len(VLLM) // 2]
    assert not cut.endswith(b"\n")
    with FakeEngine(cut) as srv:
        err = failure(make_source(srv.url))
    assert err.reason == "parse" and "line " in err.message


@pytest.mark.parametrize("send_length", [True, False])
def test_body_over_the_cap(send_length: bool) -> None:
    with FakeEngine(VLLM, framing="length" if send_length else "close") as srv:
        err = failure(make_source(srv.url, max_body_bytes=len(VLLM) - 1))
        ok = make_source(srv.url, max_body_bytes=len(VLLM)).sample()
    assert err.reason == "too_large"
    assert ok.points


def test_too_many_series_past_the_input_safety_limit() -> None:
    # over the published-series budget an engine is trimmed (tests/engines/test_engine_hardening_budget.py);
    # only past the input safety limit (4 x budget, at least 50 000 lines) is it rejected; spread over
    # 1 000 families, each under its share (one family over its share is dropped alone: test_family_budget.py)
    body = VLLM + "".join(f"unwanted_metric_{i % 1_000} 1\n" for i in range(50_001)).encode()
    with FakeEngine(body) as srv:
        err = failure(make_source(srv.url, max_series=100))
        srv.body = VLLM
        trimmed = make_source(srv.url, max_series=100).sample()
    assert err.reason == "too_many_series" and "50000" in err.message
    assert trimmed.points


def test_per_series_problem_is_a_partial_error_not_a_failure() -> None:
    body = fixture("real-triton-core-docs-first-response-histogram.prom").encode()
    with FakeEngine(body) as srv:
        result = make_source(srv.url).sample()
    assert [e.reason for e in result.partial_errors] == ["parse"]
    assert any(p.name == "llm_engine_info" for p in result.points)


def test_bearer_token_sent_reread_and_never_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    with FakeEngine(VLLM) as srv:
        source = make_source(srv.url, bearer_token_file=str(token_file))
        store = SnapshotStore()
        runner = SourceRunner(source, store, log_every=0.0)  # every transition logged (no quiet minute)
        runner.sample_once()
        assert srv.seen_headers[-1]["Authorization"] == f"Bearer {TOKEN}"
        # the engine starts refusing the token: source down, reason counted, no secret anywhere
        srv.status = 401
        runner.sample_once()
        errors: list[str] = []
        for bad in (TOKEN + "\nsecond line", ""):
            token_file.write_text(bad)
            errors.append(failure(source).message)
            runner.sample_once()
        # rotation: the next scrape reads the new file content
        srv.status = 200
        token_file.write_text("rotated-token")
        runner.sample_once()
        assert srv.seen_headers[-1]["Authorization"] == "Bearer rotated-token"
        source.close()
    state = store.states()["engine:eng1"]
    assert state.up and state.errors == {"http_status": 1, "malformed": 2}
    snap = store.snapshot()
    labels = " ".join(f"{k}={v}" for p in snap.points for k, v in p.labels.items())
    for text in [caplog.text, labels, *errors, str(state.last_error)]:
        assert TOKEN not in text
    assert "source engine:eng1 down" in caplog.text and "recovered" in caplog.text


def test_missing_token_file_is_reported_without_contents(tmp_path: Path) -> None:
    err = failure(make_source(closed_port_url(), bearer_token_file=str(tmp_path / "gone")))
    assert err.reason == "file_missing"


def test_source_recovers_by_itself_after_the_engine_comes_back() -> None:
    with FakeEngine(b"", status=503) as srv:
        source = make_source(srv.url)
        store = SnapshotStore()
        runner = SourceRunner(source, store)
        runner.sample_once()
        assert not store.snapshot().source_up("engine:eng1")
        srv.set(status=200, body=VLLM)
        runner.sample_once()
        source.close()
    snap = store.snapshot()
    assert snap.source_up("engine:eng1")
    assert snap.total("llm_scheduler_requests_running", server="eng1") == 8
    assert store.states()["engine:eng1"].errors == {"http_status": 1}


def test_userinfo_never_reaches_messages() -> None:
    assert safe_url("http://user:pw@127.0.0.1:9/metrics") == "http://127.0.0.1:9/metrics"
    err = failure(make_source(closed_port_url().replace("http://", "http://user:pw@")))
    assert "pw" not in err.message


# --------------------------------------------------------------------------- TLS


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_tls_ca_bundle_and_verify_switch(tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    with FakeEngine(VLLM, tls=ctx) as srv:
        unverified = failure(make_source(srv.url))
        with_ca = make_source(srv.url, ca_bundle=str(cert)).sample()
        no_verify = make_source(srv.url, tls_verify=False).sample()
    assert unverified.reason == "connection" and "TLS" in unverified.message
    assert with_ca.points and no_verify.points
