"""End to end: ``ramp`` against the simulator and a real ``serve``, one scenario per test.

Each test starts the simulator and the exporter as subprocesses on free
127.0.0.1 ports (tests/ramp/ramp_stack.py), runs ``python -m exporter ramp`` as
a user would, and reads report.json. Knobs and loads put the scenario's limit
inside a short ramp on a small shared CPU:

- the simulator runs at or below real time (``--time-scale`` 0.25-1) and steps
  are 4-6 s: each step has tens of requests while the client, simulator and
  exporter stay well under a core, so what bends the curve is the simulated
  engine, not the test machine (an 8B model at 16 concurrent streams is ~1,000
  tokens/s of Python SSE on each side, more than a shared 2-core box sustains);
- the exporter judges over a 4 s window, so a step's verdict is about that step
  (host_bound also shortens the diagnosis's "sustained" look-back, see there).

The verdict asserted is the issue's: the baseline at concurrency 1 is
``healthy`` and the layer that gave out first is the diagnosis's primary at the
knee (kv_pressure: memory, with its chain in report.md and on the terminal).

One ramp per scenario, no second attempt: a ramp that needs a retry to pass is testing
the host. The simulator's front end no longer waits on its engine's lock (a lock-free
inbox, reads off the event loop: exporter/simulator/engine.py), so a short CPU slows
the client and the engine together rather than emptying the engine's queue; the
failure message shows the step table, the simulator's CPU included.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from exporter.ramp.plot import PIXELS
from tests.ramp.ramp_stack import SimStack, run_ramp_cli

pytestmark = [pytest.mark.timeout(400)]

Check = Callable[[dict[str, Any]], list[str]]


def ramp(stack: SimStack, out: Path, args: list[str], progress: bool = False) -> dict[str, Any]:
    """Run the CLI; what must hold for any scenario is asserted here, the verdict by the caller."""
    cmd = ["--target", stack.sim_url, "--exporter", stack.exp_url, "--report", str(out), "--sample-interval", "0.5", *args]
    r = run_ramp_cli(cmd if progress else [*cmd, "--no-progress"], timeout=180)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stderr[-3000:]}"
    doc: dict[str, Any] = json.loads((out / "report.json").read_text())
    assert doc["complete"] is True and doc["error"] is None
    with Image.open(out / "report.png") as img:
        assert img.size == PIXELS
    for step in doc["steps"]:
        # the ramp drains each step: no request of its own is ever aborted
        assert step["client"]["cancelled"] == 0, step["client"]
        assert step["client"]["errors"] == 0, step["client"]["error_messages"]
        assert step["exporter"]["samples"] >= 4 and step["diagnosis"]["samples"] >= 3
    doc["_stderr"] = r.stderr
    doc["_md"] = (out / "report.md").read_text()
    return doc


def table(doc: dict[str, Any]) -> str:
    """One line per step: what the client saw, what the simulator's busiest thread got, the layers."""
    sat = doc["saturation"] or {}
    lines = [
        f"knee={doc['knee'] and doc['knee']['concurrency']} first={doc['first_saturated_layer']}/{doc['cause']} "
        f"source={sat.get('source')} note={doc.get('note')!r} baseline={doc.get('baseline_state')} "
        f"baseline_saturated={doc['baseline_saturated']}"
    ]
    for s in doc["steps"]:
        g = s["exporter"]["gauges"]
        cpu = g.get("busiest_thread_cpu_ratio", {}).get("mean")
        want = g.get("busiest_thread_cpu_demand_ratio", {}).get("mean")
        layers = {n: v["status"] for n, v in s["diagnosis"]["layers"].items() if v["status"] not in ("ok", "unknown")}
        d = s["diagnosis"]
        named = {f"{p['layer']}/{p['cause']}": p["readings"] for p in d.get("primaries", [])}
        lines.append(
            f"  c={s['concurrency']} {s['client']['output_tokens_per_s']:.0f} tok/s scaling={s['scaling']} "
            f"ttft_p95={s['client']['ttft_s']['p95']} flags={s['flags']} transient={s['transient_flags']} "
            f"preempt={s['exporter']['counters'].get('preemptions')} sim thread cpu/wanted={cpu}/{want} {layers} "
            f"state={d.get('state')} {d.get('states')} primaries={named}"
        )
    return "\n".join(lines)


def measure(
    tmp_path: Path,
    scenario: str,
    knobs: list[str],
    time_scale: float,
    interval: float,
    args: list[str],
    check: Check,
    progress: bool = False,
    recent_s: float | None = None,
) -> dict[str, Any]:
    """One ramp on a fresh stack; its report, or the test fails with the check's problems and the step table."""
    with SimStack(scenario, knobs, time_scale=time_scale, interval=interval, recent_s=recent_s) as stack:
        doc = ramp(stack, tmp_path / "ramp", args, progress=progress)
    problems = check(doc)
    if problems:
        pytest.fail(f"{problems}\n{table(doc)}")
    return doc


def kv_pressure_check(doc: dict[str, Any]) -> list[str]:
    problems = []
    knee, sat = doc["knee"], doc["saturation"]
    if knee is None:
        return ["no knee"]
    # the baseline at concurrency 1 is healthy: nothing suffers, no layer in warning (a decoding
    # GPU reads HBM hard from the first request; that is headroom information, not a warning)
    if doc["baseline_state"] != "healthy" or doc["baseline_saturated"]:
        problems.append(f"baseline {doc['baseline_state']}, saturated at the baseline {doc['baseline_saturated']}")
    # the layer that gave out first is the diagnosis's primary at the knee: memory, with its chain
    if doc["first_saturated_layer"] != "memory" or doc["cause"] != "kv_cache_pressure":
        problems.append(f"gave out first {doc['first_saturated_layer']}/{doc['cause']}, expected memory")
    # (the knee step's primary; when the knee lands on the first preemptions, which only warn while
    # nobody suffers yet, the primary of the step that confirms it)
    elif not (sat["source"] == "primary" and sat["crossed"] and sat["step_index"] <= knee["index"] + 1):
        problems.append(f"saturation {sat}")
    elif not (sat["chain"] and doc["chain"] == sat["chain"] and f"\nChain: {sat['chain']}\n" in doc["_md"]):
        problems.append(f"chain {sat['chain']!r} (report.md shows it: {'Chain:' in doc['_md']})")
    elif not (any("kv_cache_usage" in k for k in sat["evidence"]) and sat["advice"]):
        problems.append(f"evidence {sat['evidence']}")
    # the knee comes with the preemptions: they start at the knee or one step before it
    # (a few preemptions may not bend the curve yet), never earlier
    pre = [s["exporter"]["counters"].get("preemptions", 0.0) for s in doc["steps"]]
    first = next((i for i, n in enumerate(pre) if n > 0), None)
    if first is None or not knee["index"] - 1 <= first <= knee["index"]:
        problems.append(f"preemptions per step {pre}, knee at step {knee['index']}")
    return problems


def test_kv_pressure_knee_at_first_preemptions_and_memory_gives_out_first(tmp_path: Path) -> None:
    # 30 blocks of 16 tokens; a request grows to 64 + 128 tokens = 12 blocks: 2 fit, while
    # admission (4 blocks a prompt) lets 4 in, which then preempt each other as they grow
    doc = measure(
        tmp_path,
        "kv_pressure",
        ["--num-gpu-blocks", "30"],
        1.0,
        0.5,
        ["--concurrency", "1,2,4,8", "--step-seconds", "4", "--prompt-tokens", "64", "--output-tokens", "128"],
        kv_pressure_check,
        progress=True,
    )
    # the terminal view ran (rich) and named the verdict: the baseline's state, the primary and its chain
    assert "baseline (concurrency 1): healthy" in doc["_stderr"]
    assert "gave out first: memory at concurrency" in doc["_stderr"] and "chain: " in doc["_stderr"]


def host_bound_check(doc: dict[str, Any]) -> list[str]:
    if doc["knee"] is None:
        return ["no knee"]
    problems = []
    if doc["baseline_state"] != "healthy":
        problems.append(f"baseline {doc['baseline_state']}")
    if doc["first_saturated_layer"] != "scheduler" or doc["cause"] != "serial_host_ceiling":
        problems.append(f"gave out first {doc['first_saturated_layer']}/{doc['cause']}, expected scheduler")
    elif doc["saturation"]["step_index"] > doc["knee"]["index"] or "scheduler" in doc["baseline_saturated"]:
        problems.append(f"saturation {doc['saturation']}")
    elif doc["saturation"]["source"] != "primary" or not doc["chain"]:
        problems.append(f"named from {doc['saturation']['source']}, chain {doc['chain']!r}")
    return problems


def test_host_bound_scheduler_gives_out_first(tmp_path: Path) -> None:
    # A 1B model (GPU step ~0.6 ms) behind an 8 ms + 0.2 ms/request serial host loop, at
    # most 4 running: one thread at a full core with the SMs idle from the start; a bigger
    # batch amortises the loop (near-linear to 4), then requests queue and the curve is flat.
    # The step after 4 is 12 clients, not 8: with 8 clients on 4 slots each waiter waits about
    # one request's time, at the queueing line (0.3 s), and the symptom then rests on a queue
    # that never empties, which holds only while the load generator sends each next request at
    # once; a starved host (CI: 2 cores, three stacks) lets the queue touch 0 between scrapes
    # and reads that step healthy (seen: all 12 readings at 8 clients). With 8 waiting on 4
    # slots the recently admitted wait about two requests' time, past the line however the
    # clients are scheduled. The diagnosis's recent look-back is shortened to 2.5 s (its
    # default 5 s spans the previous step's drain) and steps are 6 s: the knee step is
    # degraded well within itself, with the scheduler primary.
    knobs = ["--params-b", "1", "--host-base-s", "0.008", "--host-per-seq-s", "0.0002", "--max-num-seqs", "4"]
    measure(
        tmp_path,
        "host_bound",
        knobs,
        0.5,
        1.0,
        ["--concurrency", "1,2,4,12,16", "--step-seconds", "6", "--prompt-tokens", "128", "--output-tokens", "32"],
        host_bound_check,
        recent_s=2.5,
    )


def healthy_check(doc: dict[str, Any]) -> list[str]:
    steps = doc["steps"]
    problems = []
    if doc["knee"] is not None or doc["first_saturated_layer"] is not None:
        problems.append("a knee in healthy")
    if doc["baseline_state"] != "healthy":
        problems.append(f"baseline {doc['baseline_state']}")
    # near-linear over the range: 8x the clients give at least 0.7 x 8 the tokens/s
    first, last = steps[0], steps[-1]
    gain = last["client"]["output_tokens_per_s"] / first["client"]["output_tokens_per_s"]
    if gain < 0.7 * last["concurrency"] / first["concurrency"]:
        problems.append(f"throughput gain {gain:.2f} over {first['concurrency']}->{last['concurrency']}")
    if any(s["exporter"]["counters"].get("preemptions", 0.0) for s in steps):
        problems.append("preemptions")
    return problems


def test_healthy_with_a_large_kv_cache_scales_without_a_knee(tmp_path: Path) -> None:
    # TTFT p95 of a step jitters by up to ~200 ms on a shared 2-core box whatever the server
    # does (a stalled client delays every stream it holds): the jump's absolute floor is
    # raised above that noise; the ratio (2x) stays the default.
    doc = measure(
        tmp_path,
        "healthy",
        ["--num-gpu-blocks", "20000"],
        0.25,
        1.0,
        [
            "--concurrency",
            "1,2,4,8",
            "--step-seconds",
            "5",
            "--prompt-tokens",
            "128",
            "--output-tokens",
            "32",
            "--ttft-jump-min-ms",
            "250",
        ],
        healthy_check,
    )
    assert doc["cause"] is None
