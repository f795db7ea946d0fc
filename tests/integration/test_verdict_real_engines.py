"""The verdict against real engines under a steady closed-loop load, read repeatedly.

The real tier's shared CPU vLLM (``cpu_vllm`` in tests/conftest.py) and the cached
llama.cpp server, started in the configuration a case needs, a real ``serve`` scraping it (engine
every 2 s, diagnosis every second, no GPU: the CPU engines have none), and a closed
loop of clients. After a warm-up the verdict is read ``READINGS`` times, a few
seconds apart; each case must be right in at least ``MIN_SHARE`` of them:

| engine | configuration and load | verdict |
|---|---|---|
| vLLM | one client, short answers: its requests fit the cache | healthy |
| vLLM | a KV cache far too small for ten clients | memory/kv_cache_pressure |
| llama.cpp | four slots, one client | healthy |
| llama.cpp | one slot, six clients | memory/kv_fragmentation_or_capacity_misjudged |

A vLLM with one sequence slot under ten clients reads memory/kv_fragmentation_or_capacity_misjudged:
tests/tune/test_tune_vllm.py asserts it of tune's baseline, a one-slot vLLM under load (its
own cold start, so no third configuration of the shared engine here).

The engines run at a lower priority (``nice 10``), as a CPU request would
guarantee the exporter its share on a real node; otherwise its samples miss their
deadlines and the test measures the scheduler, not the verdict. vLLM's engine core
and worker run below its own API server (SCHED_IDLE, see
``integration_helpers.vllm_engine_below_front_end``): on a GPU node the model does not
take the host cores its front end needs. The readings and
their share are written to ``$LLM_EXPORTER_INTEGRATION_LOGS/verdict-<case>.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.integration_helpers import (
    LOG_DIR,
    CpuVllm,
    Proc,
    engine_priority,
    llamacpp_proc,
    skip_if_off,
    start_exporter_with,
)
from tests.support.loadloop import ClosedLoop, primary_of, read_verdicts, story
from tests.support.processes import tail
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.timeout(900)]

READINGS = 10
SPACING_S = 2.0
MIN_SHARE = 0.8
#: load before the first reading: the diagnosis window (20 s) mostly filled with this load
WARMUP_S = 15.0
NICE = ["nice", "-n", "10"]


@dataclass(frozen=True)
class Case:
    name: str
    engine: str  # "vllm" | "llamacpp"
    args: tuple[str, ...]  # engine arguments of this case
    clients: int
    max_tokens: int
    expected: str  # primary_of() of a right verdict


CASES = [
    # the shared engine's 10 blocks of 32 tokens: one client's request (48-96 + 16 tokens) fits in 4
    Case("vllm-light", "vllm", (), 1, 16, "healthy"),
    # each request grows to ~230 tokens (8 blocks): one fits, the rest wait or are preempted
    # (long outputs: the engine, not the HTTP front end that tokenises on the same two cores, is the limit)
    Case("vllm-kv-small", "vllm", (), 10, 160, "memory/kv_cache_pressure"),
    Case("llamacpp-light", "llamacpp", ("-np", "4", "-c", "4096"), 1, 32, "healthy"),
    # one slot, five clients waiting for it, and a slot context (2,048 tokens: the model's own) that would
    # hold several of these ~250-token requests: the slots, not the memory, hold the queue
    Case("llamacpp-one-slot", "llamacpp", ("-np", "1", "-c", "4096"), 6, 192, "memory/kv_fragmentation_or_capacity_misjudged"),
]


@contextmanager
def _engine(case: Case, request: pytest.FixtureRequest) -> Iterator[tuple[str, int, int | None]]:
    """The case's engine, below the exporter for the case's duration: its base URL, its process id
    and the port its OTLP request spans go to (None: it sends none)."""
    if case.engine == "vllm":
        vllm: CpuVllm = request.getfixturevalue("cpu_vllm")
        with engine_priority(vllm.proc, nice=10, idle_engine=True):
            yield vllm.base, vllm.proc.pid, vllm.otlp_port
        return
    args = ["-t", "1", "--threads-http", str(case.clients + 4), *case.args]
    proc, base = llamacpp_proc(args, f"verdict-{case.name}", prefix=NICE)  # nice execs: the pid is the server's
    proc.start_answering(base + "/health", 120.0)
    try:
        yield base, proc.pid, None
    finally:
        proc.stop()


def _start_exporter(case: Case, engine_base: str, engine_pid: int, otlp_port: int | None) -> tuple[Proc, str]:
    # deployed beside the engine as the README says: its metrics and its process (the sampler), no GPU;
    # the engine's request spans, where it sends them (docs/tracing.md)
    traces = ["--otlp-http-listen-address", f"127.0.0.1:{otlp_port}"] if otlp_port is not None else []
    return start_exporter_with(
        [
            *traces,
            "--engine",
            engine_base + "/metrics",
            "--engine-pid",
            str(engine_pid),
            "--gpu-source",
            "none",
            "--engine-interval",
            "2",
            "--engine-timeout",
            "1.8",
            "--diagnosis-interval",
            "1",
            "--log-level",
            "info",
        ],
        f"verdict-{case.name}-exporter",
    )


def _sender(case: Case, engine_base: str) -> Callable[[httpx.Client, int], int]:
    rng = random.Random(case.name)
    if case.engine == "vllm":

        def send(client: httpx.Client, _n: int) -> int:
            prompt = [rng.randrange(10, 500) for _ in range(rng.randrange(48, 96))]
            body = {"model": "tiny", "prompt": prompt, "max_tokens": case.max_tokens, "ignore_eos": True, "temperature": 0}
            return client.post(engine_base + "/v1/completions", json=body).status_code
    else:

        def send(client: httpx.Client, _n: int) -> int:
            prompt = [259 + rng.randrange(0, 100) for _ in range(rng.randrange(32, 64))]
            body = {"prompt": prompt, "n_predict": case.max_tokens, "ignore_eos": True, "temperature": 0, "cache_prompt": False}
            return client.post(engine_base + "/completion", json=body).status_code

    return send


def _record(case: Case, verdicts: list[dict[str, Any]], share: float, load: ClosedLoop) -> None:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    figures = {
        "case": case.name,
        "expected": case.expected,
        "share_right": share,
        "readings": [primary_of(v) for v in verdicts],
        "completed_requests": load.completed,
        "statuses": dict(load.statuses),
        "client_errors": dict(load.errors),
        "chains": [v["primary"]["chain"] for v in verdicts if v.get("primary")][:3],
        "confidences": [v["primary"]["confidence"] for v in verdicts if v.get("primary")],
        "last": {k: verdicts[-1].get(k) for k in ("primary", "symptoms", "notices", "signals")} if verdicts else None,
        "loadavg": os.getloadavg(),
        "story": story(verdicts).splitlines(),
    }
    (LOG_DIR / f"verdict-{case.name}.json").write_text(json.dumps(figures, indent=2))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_verdict_on_a_real_engine_under_load(case: Case, request: pytest.FixtureRequest) -> None:
    skip_if_off(case.engine)
    with contextlib.ExitStack() as stack:
        engine_base, engine_pid, otlp_port = stack.enter_context(_engine(case, request))
        exporter, exporter_base = _start_exporter(case, engine_base, engine_pid, otlp_port)
        stack.callback(exporter.stop)
        # each read has its own bound; the load outlives all of them, so no reading is taken after it stopped
        # (on a slow 2-core runner a verdict can take several seconds to change: the bounds are generous)
        first_s, warm_s, read_s = WARMUP_S + 30, WARMUP_S + 20, READINGS * SPACING_S * 6 + 60
        with ClosedLoop(_sender(case, engine_base), case.clients, deadline_s=first_s + warm_s + read_s + 30) as load:
            # warm-up: the window fills with this load
            first = read_verdicts(exporter_base, 1, 0.0, first_s)
            assert first, f"no verdict from the exporter; log {exporter.log}"
            read_verdicts(exporter_base, int(WARMUP_S), 1.0, warm_s)
            read_from = time.time()
            verdicts = read_verdicts(exporter_base, READINGS, SPACING_S, read_s)
            read_to = time.time()
        assert len(verdicts) == READINGS, f"only {len(verdicts)} verdicts; exporter log {exporter.log}"
        assert load.completed > 0, f"no request completed: {dict(load.statuses)} {dict(load.errors)}"
        readings = Counter(primary_of(v) for v in verdicts)
        share = readings[case.expected] / len(verdicts)
        _record(case, verdicts, share, load)
        assert share >= MIN_SHARE, (
            f"{case.name}: {case.expected} in {share:.0%} of {len(verdicts)} readings ({dict(readings)})\n{story(verdicts)}"
        )
        if case.expected != "healthy":
            # every reading that names it carries its chain; its confidence is read over those readings
            # (the first one may be the cycle it just became primary, before it counts as settled)
            right = [v for v in verdicts if primary_of(v) == case.expected]
            assert all("←" in v["primary"]["chain"] for v in right), story(verdicts)
            assert statistics.median(v["primary"]["confidence"] for v in right) > 0.5, story(verdicts)
        if otlp_port is not None:
            _check_traced_requests(case, exporter_base, (read_from, read_to), request.getfixturevalue("cpu_vllm").proc.log)


#: the most a traced request's queue + prefill + decode may differ from its end-to-end time (the issue's 5 %;
#: the record partitions e2e, docs/tracing.md: only float rounding remains)
PHASE_SUM_TOLERANCE = 0.05
#: the slowest traced requests read, of those that finished while the verdict was read
SLOWEST = 5
#: the longest wait for their spans (batches every 0.5 s; generous for a starved host)
SPANS_DEADLINE_S = 60.0


def _check_traced_requests(case: Case, exporter_base: str, reading: tuple[float, float], engine_log: Path) -> None:
    """The engine's own spans, joined: under KV pressure the slowest requests waited (queue over half
    of their time) and lived through a memory-layer primary; with room, nobody waited and nothing was
    named. Every record's phases add up to its end-to-end time; the exposition carries exemplars.

    Which requests: those that *finished* while the verdict was read (``reading``, Unix seconds), so
    their lives overlap the readings. Not those that arrived then: vLLM writes a span when a request
    finishes, and under KV pressure a request that arrives during the readings waits behind nine others
    for longer than the readings last; the load stops after them, so most such requests end aborted,
    with no span (seen in a whole real tier: 4 of them finished, every one of the 154 completed requests
    was received)."""
    read_from, read_to = reading

    def held() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = httpx.get(exporter_base + "/requests", params={"slowest": "1000"}, timeout=10).json()[
            "requests"
        ]
        return found

    def finished_while_read(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in records if read_from <= r["arrival"] + (r["e2e_seconds"] or 0.0) <= read_to]

    def enough() -> list[dict[str, Any]] | None:
        recent = finished_while_read(held())
        return recent if len(recent) >= SLOWEST else None

    # vLLM's span processor exports in batches, a little late (integration_helpers.TRACING_ENV):
    # wait for the readings' requests, bounded
    def why_not() -> str:
        # what the receiver counted (received, dropped, rejected, ignored by reason), what it holds, what the
        # engine's span exporter said
        text = httpx.get(exporter_base + "/metrics", timeout=10).text
        counters = [line for line in text.splitlines() if line.startswith("llm_trace_") and not line.endswith(" 0.0")]
        finishes = sorted(round(r["arrival"] + (r["e2e_seconds"] or 0.0) - read_from, 2) for r in held())[-20:]
        return (
            f"receiver: {counters}\nreading lasted {read_to - read_from:.1f} s; held finishes - its start: {finishes}\n"
            f"engine log:\n{tail(engine_log, 40)}"
        )

    wait_until(
        enough,
        SPANS_DEADLINE_S,
        f"{SLOWEST} traced requests that finished while the verdict was read",
        detail=why_not,
    )
    records = held()
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    (LOG_DIR / f"requests-{case.name}.json").write_text(json.dumps(records[:50], indent=2))
    for r in records:
        parts = [r["queue_seconds"], r["prefill_seconds"], r["decode_seconds"]]
        assert None not in parts and r["e2e_seconds"], r
        assert abs(sum(parts) - r["e2e_seconds"]) <= PHASE_SUM_TOLERANCE * r["e2e_seconds"], r
    recent = finished_while_read(records)[:SLOWEST]  # /requests lists the slowest first
    waited = [r["queue_seconds"] / r["e2e_seconds"] for r in recent]
    named = [r["primary"]["layer"] if r["primary"] else None for r in recent]
    # right as the verdict itself must be (MIN_SHARE of its readings): a request explains itself by the
    # verdicts over its life
    if case.expected == "healthy":
        right = [w < 0.1 and n is None for w, n in zip(waited, named, strict=True)]
    else:
        right = [w > 0.5 and n == "memory" for w, n in zip(waited, named, strict=True)]
    assert sum(right) / SLOWEST >= MIN_SHARE, (waited, named, [r["sentence"] for r in recent])
    text = httpx.get(exporter_base + "/metrics", headers={"Accept": "application/openmetrics-text"}, timeout=10).text
    assert '# {trace_id="' in text and "llm_traced_request_seconds_bucket" in text
