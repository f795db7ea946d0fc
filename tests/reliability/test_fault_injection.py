"""Fault injection on real parts: a `serve` subprocess, real local engine servers, a replayed GPU.

One exporter runs for the whole module with two engines (``flaky``, whose
behaviour each test switches, and ``steady``) and two replayed GPUs. For every
fault: /metrics keeps answering 200 within 1 s (a watchdog scrapes it all the
time), the faulty source is marked (``source_up 0``, its errors counter rising
with the right reason and no other, its stale series gone), the other sources
keep updating (their last-success timestamps advance), and the source recovers
on its own once the fault clears.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.rel_helpers import TRACE, Metrics, Serve, Watchdog, replay_copies
from tests.support.exposition import vllm_exposition
from tests.support.fake_engine import MAX_HANDLER_WAIT_S, FakeEngine

INTERVAL = 1.5  # engine and GPU interval, seconds (a timeout must be below its interval)
FLAKY_TIMEOUT = 1.0
FLAKY = "engine:flaky"
STEADY = "engine:steady"
WAIT = 20.0  # bound on every wait (the machine running CI may be busy)

HEALTHY = vllm_exposition(1).encode()  # a realistic 55 KB vLLM exposition
BIG = (HEALTHY * (12_000_000 // len(HEALTHY) + 1))[:12_000_000]  # 12 MB, over the 10 MiB default cap
MANY_SERIES = "".join(
    f'vllm:num_requests_running{{engine="{i}",model_name="m"}} 1\n' for i in range(100_000)
).encode()  # 100 000 series (~6 MB, under the byte cap): over the 20 000-series default


class Rig:
    def __init__(self, serve: Serve, flaky: FakeEngine, watchdog: Watchdog, traces: list[Path]) -> None:
        self.serve, self.flaky, self.watchdog, self.traces = serve, flaky, watchdog, traces


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    tmp = tmp_path_factory.mktemp("faults")
    traces = replay_copies(tmp, 2)
    with FakeEngine(HEALTHY) as flaky, FakeEngine(HEALTHY) as steady:
        config = tmp / "exporter.yaml"
        config.write_text(
            "engines:\n"
            f"  - {{url: '{flaky.url}', name: flaky, interval: {INTERVAL}, timeout: {FLAKY_TIMEOUT}}}\n"
            f"  - {{url: '{steady.url}', name: steady, interval: {INTERVAL}, timeout: 1.4}}\n"
        )
        args = ["--config", str(config), "--gpu-source", "replay:" + ",".join(map(str, traces)), "--gpu-interval", str(INTERVAL)]
        with Serve(args) as serve:
            serve.wait_metrics(
                lambda m: m.up("gpu") == 1 and m.up(FLAKY) == 1 and m.up(STEADY) == 1, 60, "every source up at start"
            )
            with Watchdog(serve.base) as watchdog:
                yield Rig(serve, flaky, watchdog, traces)
                watchdog.check()
                assert watchdog.scrapes > 10
                serve.check_clean()
                print(f"\nwatchdog: {watchdog.scrapes} scrapes, slowest {watchdog.slowest * 1e3:.0f} ms")


def _errors_by_reason(m: Metrics, source: str) -> dict[str, float]:
    return {lab["reason"]: v for lab, v in m.find("llm_exporter_source_errors_total", source=source)}


def _check_fault(
    rig: Rig, faulty: str, reason: str, others: tuple[str, ...], fault_series: dict[str, tuple[str, str]]
) -> Metrics:
    """After a fault was injected: marked, only `reason` counted, still cycling, others fresh."""
    serve = rig.serve
    before = serve.metrics(timeout=2)
    errors0 = _errors_by_reason(before, faulty)
    fresh0 = {s: before.last_success(s) for s in others}
    m = serve.wait_metrics(
        lambda m: m.up(faulty) == 0 and m.errors(faulty, reason) > errors0.get(reason, 0),
        WAIT,
        f"{faulty} marked down with reason {reason}",
    )
    # still cycling: the counter keeps rising; the others keep sampling; the faulty one's series expire
    m = serve.wait_metrics(
        lambda m: (
            m.errors(faulty, reason) >= errors0.get(reason, 0) + 2
            and all(m.last_success(s) > fresh0[s] for s in others)
            and not any(m.find(name, **{key: value}) for name, (key, value) in fault_series.items())
        ),
        WAIT,
        f"{faulty} still cycling, its series expired, the others fresh",
    )
    assert m.up(faulty) == 0
    for s in others:
        assert m.up(s) == 1, f"{s} went down during a fault of {faulty}"
    rising = {r for r, v in _errors_by_reason(m, faulty).items() if v > errors0.get(r, 0)}
    assert rising == {reason}, f"{faulty}: expected only {reason!r} to rise, got {sorted(rising)}"
    return m


ENGINE_FAULTS = [
    # (fault id, what the flaky engine is switched to, reason)
    ("down", {"down": True}, "connection"),
    ("hanging", {"delay": MAX_HANDLER_WAIT_S}, "timeout"),  # accepts, reads the request, never answers
    ("slow", {"delay": FLAKY_TIMEOUT + 1.0}, "timeout"),  # answers, but only after the client's timeout
    ("5xx", {"status": 503, "body": b"<html><body>503 Service Unavailable</body></html>\n"}, "http_status"),
    ("garbage_html", {"body": b"<!doctype html><html><body><h1>Welcome to nginx!</h1></body></html>\n"}, "parse"),
    ("garbage_binary", {"body": bytes(range(256)) * 64}, "parse"),
    ("truncated_mid_line", {"body": HEALTHY[: len(HEALTHY) // 2], "framing": "close"}, "parse"),
    ("truncated_declared_length", {"framing": "short"}, "connection"),  # declares the length, sends half
    ("body_12MB", {"body": BIG}, "too_large"),
    ("body_12MB_chunked", {"body": BIG, "framing": "close"}, "too_large"),
    ("series_100k", {"body": MANY_SERIES}, "too_many_series"),
]


@pytest.mark.parametrize("fault, change, reason", ENGINE_FAULTS, ids=[f[0] for f in ENGINE_FAULTS])
def test_engine_fault_is_marked_isolated_and_recovers(rig: Rig, fault: str, change: dict[str, object], reason: str) -> None:
    serve = rig.serve
    start = serve.metrics(timeout=2)
    assert start.up(FLAKY) == 1, "previous test left the flaky engine down"
    rig.flaky.set(**change)
    try:
        _check_fault(rig, FLAKY, reason, ("gpu", STEADY), {"llm_engine_info": ("server", "flaky")})
    finally:
        rig.flaky.reset()
    recovered_after = serve.metrics(timeout=2).last_success(FLAKY)
    m = serve.wait_metrics(
        lambda m: m.up(FLAKY) == 1 and m.last_success(FLAKY) > recovered_after and m.find("llm_engine_info", server="flaky"),
        WAIT,
        "the flaky engine to recover on its own",
    )
    assert m.find("llm_scheduler_requests_running", server="flaky")
    rig.watchdog.check()


def test_replay_file_deleted_while_running_then_restored(rig: Rig) -> None:
    serve = rig.serve
    victim = rig.traces[1]
    victim.unlink()
    try:
        _check_fault(rig, "gpu", "file_missing", (FLAKY, STEADY), {"llm_gpu_up": ("gpu", "1")})
    finally:
        shutil.copy(TRACE, victim)
    m = serve.wait_metrics(
        lambda m: m.up("gpu") == 1 and m.get("llm_gpu_up", gpu="1") == 1 and m.get("llm_gpu_up", gpu="0") == 1,
        WAIT,
        "the GPU source to recover once the file is back",
    )
    assert m.get("llm_gpu_power_watts", gpu="1") is not None
    rig.watchdog.check()
