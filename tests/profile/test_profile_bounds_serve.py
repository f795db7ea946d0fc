"""``POST /profile``'s bounds through a real ``serve``: a deep trace is the documented 422 in one line
(no traceback in the log), ``seconds`` in other digits a 400, and SIGTERM with a hung
``/stop_profile`` ends the process by the signal, the request answered 503, instead of waiting
for the engine (the in-process mechanisms are tests/profile/test_profile_bounds.py's)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from tests.profile.profiling_engine import MAX_HOLD_S, ProfilingEngine
from tests.reliability.rel_helpers import Serve

#: seconds SIGTERM may take before the test KILLs: the 5 s grace and a start, far under the fake's hold
TERM_GRACE_S = 20.0
assert TERM_GRACE_S < MAX_HOLD_S  # else a serve that waited for the engine would pass too


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Serve, ProfilingEngine]]:
    traces = tmp_path / "traces"
    traces.mkdir()
    with ProfilingEngine(traces) as engine:
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump({"engines": [{"url": engine.url, "name": "A", "type": "vllm", "interval": 0.5}]}))
        serve = Serve(["--config", str(path), "--gpu-source", "none", "--enable-profile", "--profile-dir", str(traces)])
        try:
            yield serve, engine
        finally:
            engine.release.set()
            serve.stop()


def post(serve: Serve, seconds: str) -> requests.Response:
    return serve.session.post(serve.base + "/profile", params={"engine": "A", "seconds": seconds}, timeout=60)


def test_a_deep_trace_and_other_digits_are_one_line_answers(stack: tuple[Serve, ProfilingEngine]) -> None:
    serve, engine = stack
    engine.mode = "deep"
    r = post(serve, "0.5")
    assert r.status_code == 422, r.text
    assert r.json()["error"].startswith("trace refused: ") and "nested deeper than 64 levels" in r.json()["error"]
    for raw in ("0_1", "١", "1e1"):
        r = post(serve, raw)
        assert r.status_code == 400 and r.json()["error"].startswith("seconds: expected"), r.text
    serve.check_clean()  # no traceback logged, no source failed for an unexpected reason


def test_sigterm_with_a_hung_stop_ends_by_the_signal(stack: tuple[Serve, ProfilingEngine]) -> None:
    serve, engine = stack
    engine.release.clear()  # /stop_profile hangs for the fake's MAX_HOLD_S
    answers: list[requests.Response] = []
    client = threading.Thread(target=lambda: answers.append(post(serve, "0.5")), daemon=True)
    client.start()
    tick = threading.Event()
    for _ in range(1000):  # at most 10 s: until the exporter is inside its stop call
        if "/stop_profile" in engine.calls:
            break
        tick.wait(0.01)
    assert engine.calls == ["/start_profile", "/stop_profile"]
    code = serve.child.stop(grace_s=TERM_GRACE_S)
    assert code == -signal.SIGTERM, f"serve did not end by SIGTERM ({code}): {serve.log_tail()}"
    assert not engine.release.is_set()  # the engine never answered the stop
    client.join(10.0)
    assert answers and answers[0].status_code == 503, answers
    assert "cut short, the exporter is shutting down" in answers[0].json()["error"]
