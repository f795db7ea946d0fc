"""``llm-layer-exporter demo``: simulator + load + exporter on 127.0.0.1, with a live view.

Why this shape: it is the README's first command and must work right after
``pip install '.[tools]'`` (scripts/run.sh) on a laptop with no GPU and no inference server;
its flags are exporter/commands/demo.py's. It starts
three real things — the simulated server (a child process, so the exporter's
process sampler can watch its scheduler thread), the exporter (``python -m
exporter serve`` reading the simulator's ``/metrics`` and ``/sim/gpu``) and an
asynchronous load — then renders the exporter's own ``/metrics``, layer by
layer, and the verdict of ``/diagnosis`` once it answers.

Two modes:

* ``demo`` (no ``--scenario``): a **tour**. ``healthy`` first, then every
  scenario with a known cause for ``--tour-seconds`` each (switched live with
  ``POST /sim/scenario``), each announced with what was injected and closed by
  what the verdict concluded (primary, confidence, chain); between scenarios
  the simulator goes back to ``healthy`` until the diagnosis is quiet. A table
  of scenario -> primary named (and whether it is the expected one) ends it.
  It runs the simulator as the scenario proofs do (4 GPUs, time scale 4, a
  10 s diagnosis window) unless ``--gpus`` / ``--time-scale`` say otherwise.
* ``demo --scenario NAME``: one scenario until Ctrl-C or ``--duration``.

The view shows the values the diagnosis judged (``/diagnosis?signals=1``: the
same window, the same units) wherever it has them; latencies are p95 over the
diagnosis' recent seconds, ratios of two things read ``×1.69``, percentages are
only for 0-1 shares, and nothing reads ``-`` when a value exists. A pipe or a
log file gets plain text; the live view only draws on a terminal.

Exit status: 0 the demo ran (its time was up, the tour ended, Ctrl-C or
SIGTERM), 1 a child failed (the simulator or the exporter did not start, or
the exporter died), 2 a bad flag, 4 cannot listen on ``--listen-address``
(checked before anything starts). Every child is stopped on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.exposition import read_metrics
from exporter.schema import SPECS, reduce_series, reduced_name

DEFAULT_LISTEN = "127.0.0.1:9750"
#: demo exit statuses (2 is the CLI's usage error, 4 the same as ``serve``'s "cannot listen")
EXIT_CHILD_FAILED = 1
EXIT_CANNOT_LISTEN = 4
#: the primary each scenario must produce: the contract of tests/diagnosis/test_diagnosis_scenarios.py
#: (a test checks the two agree); None: the diagnosis must read healthy
EXPECTED_PRIMARY: dict[str, str | None] = {
    "healthy": None,
    "kv_pressure": "memory/kv_cache_pressure",
    "kv_fragmentation": "memory/kv_fragmentation_or_capacity_misjudged",
    "host_bound": "scheduler/serial_host_ceiling",
    "memory_bandwidth_bound": "hardware/memory_bandwidth_bound",
    "power_throttled": "hardware/power_or_thermal_throttling",
    "pcie_bound": "hardware/pcie_transfer_bound",
    "low_spec_acceptance": "speculative_decoding/low_acceptance",
    "tp_imbalance": "parallel/gpu_imbalance",
    "batching_window": "application/batching_window_too_large",
    "queue_backlog": "scheduler/queue_backlog",
    "healthy_busy": None,
}
#: the tour: healthy, then every scenario that stands for a cause
TOUR: tuple[str, ...] = tuple(name for name, primary in EXPECTED_PRIMARY.items() if primary or name == "healthy")
TOUR_SECONDS = 30.0
#: the tour's simulator and diagnosis, as the scenario proofs run them (tp_imbalance needs 4 GPUs:
#: the GPU count is fixed when the simulator starts)
TOUR_GPUS = 4
TOUR_TIME_SCALE = 4.0
TOUR_WINDOW_SECONDS = 10
#: back to healthy between scenarios: this many verdicts in a row with nothing reported, at most this long
QUIET_CYCLES = 3
QUIET_MAX_SECONDS = 45.0
#: the tour's plain transcript prints a progress line this often (the scenario mode: every interval)
TOUR_TICK_SECONDS = 5.0

# service-scope signal names of the diagnosis (exporter/diagnosis/signals.py), repeated here so that
# importing this module stays cheap; a gauge's is named by how the schema reduces it (schema.reduced_name)
TTFT_P95_RECENT, TTFT_P95 = "p95_over_recent(llm_request_ttft_seconds)", "p95(llm_request_ttft_seconds)"
ITL_P95_RECENT, ITL_P95 = "p95_over_recent(llm_request_inter_token_seconds)", "p95(llm_request_inter_token_seconds)"
QUEUE_P95_RECENT, QUEUE_P95 = "p95_over_recent(llm_scheduler_queue_seconds)", "p95(llm_scheduler_queue_seconds)"
SPEC_ACCEPTANCE = "increase(llm_spec_decode_accepted_tokens_total) / increase(llm_spec_decode_draft_tokens_total)"
#: metric -> (the diagnosis signals that say the same thing, in preference order; how to show them)
SIGNAL_OF: dict[str, tuple[tuple[str, ...], str]] = {
    "llm_request_ttft_seconds": ((TTFT_P95_RECENT, TTFT_P95), "p95"),
    "llm_request_inter_token_seconds": ((ITL_P95_RECENT, ITL_P95), "p95"),
    "llm_scheduler_queue_seconds": ((QUEUE_P95_RECENT, QUEUE_P95), "p95"),
    "llm_scheduler_requests_running": ((reduced_name("llm_scheduler_requests_running"),), "count"),
    "llm_scheduler_requests_waiting": ((reduced_name("llm_scheduler_requests_waiting"),), "count"),
    "llm_kv_cache_usage_ratio": ((reduced_name("llm_kv_cache_usage_ratio"),), "share"),
    "llm_kv_cache_preemptions_total": (("rate(llm_kv_cache_preemptions_total)",), "rate"),
    "llm_generation_tokens_total": (("rate(llm_generation_tokens_total)",), "rate"),
    "llm_requests_finished_total": (("rate(llm_requests_finished_total)",), "rate"),
    "llm_requests_rejected_total": (("rate(llm_requests_rejected_total)",), "rate"),
    "llm_process_busiest_thread_cpu_ratio": ((reduced_name("llm_process_busiest_thread_cpu_ratio"),), "share"),
    "llm_process_busiest_thread_cpu_demand_ratio": ((reduced_name("llm_process_busiest_thread_cpu_demand_ratio"),), "cores"),
    "llm_process_cpu_ratio": ((reduced_name("llm_process_cpu_ratio"),), "cores"),
}
#: ``*_ratio`` metrics that are not 0-1 shares: shown as "×1.69" (skew) or "1.30 cores"
MULTIPLE_RATIOS = {"llm_parallel_sm_active_skew_ratio": "times"}
CORE_RATIOS = {"llm_process_busiest_thread_cpu_demand_ratio", "llm_process_cpu_ratio"}
#: facts that do not move (limits, sizes, counts): left out of the live view so it fits a terminal
#: (``/metrics`` has them all)
TUI_HIDDEN = frozenset(
    {
        "gpu_up",
        "gpu_profiling_available",
        "gpu_memory_total_bytes",
        "gpu_power_limit_watts",
        "gpu_sm_clock_max_hertz",
        "gpu_memory_clock_hertz",
        "gpu_energy_joules_total",
        "kv_cache_capacity_tokens",
        "kv_cache_block_size_tokens",
        "kv_cache_slot_context_tokens",
        "parallel_group_gpus",
        "process_threads",
        "process_resident_memory_bytes",
    }
)
#: One field per layer in the plain lines: (label, metric, how to show it, the diagnosis signal).
#: ``gauge``: reduced across series as the schema says (``MetricSpec.reduce``), shown in its unit.
PLAIN_FIELDS: tuple[tuple[str, str, str, str | None], ...] = (
    ("running", "llm_scheduler_requests_running", "gauge", reduced_name("llm_scheduler_requests_running")),
    ("waiting", "llm_scheduler_requests_waiting", "gauge", reduced_name("llm_scheduler_requests_waiting")),
    ("kv", "llm_kv_cache_usage_ratio", "gauge", reduced_name("llm_kv_cache_usage_ratio")),
    ("preempt/s", "llm_kv_cache_preemptions_total", "rate", "rate(llm_kv_cache_preemptions_total)"),
    ("sm", "llm_gpu_sm_active_ratio", "gauge", reduced_name("llm_gpu_sm_active_ratio")),
    ("dram", "llm_gpu_dram_active_ratio", "gauge", None),
    ("power", "llm_gpu_power_watts", "gauge", None),
    ("cpu_thread", "llm_process_busiest_thread_cpu_ratio", "gauge", reduced_name("llm_process_busiest_thread_cpu_ratio")),
    ("tok/s", "llm_generation_tokens_total", "rate", "rate(llm_generation_tokens_total)"),
    ("ttft_p95", "llm_request_ttft_seconds", "p95", None),
    ("queue_p95", "llm_scheduler_queue_seconds", "p95", None),
)


# --------------------------------------------------------------------------- reading metrics


@dataclass
class Reading:
    """One parse of the exporter's /metrics: name -> [(labels, value)], histograms as (sum, count)."""

    at: float
    values: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    hists: dict[str, tuple[float, float]] = field(default_factory=dict)

    def total(self, name: str) -> float | None:
        """A counter's value over all its series."""
        series = self.values.get(name)
        return None if not series else sum(v for _, v in series)

    def figure(self, name: str) -> float | None:
        """A gauge's series reduced the way its schema spec says (the diagnosis' reduction)."""
        return reduce_series(name, (v for _, v in self.values.get(name) or ()))


def reading_of(text: str) -> Reading:
    """The exporter's /metrics as the view reads it (parsed by exporter/exposition.py)."""
    own = read_metrics(text)
    return Reading(at=time.monotonic(), values=own.scalars(keep_nan=True), hists=own.histogram_totals())


def fmt_seconds(value: float) -> str:
    """As the diagnosis writes seconds in its chains: ms below 1 s, then s."""
    if value >= 10:
        return f"{value:.0f} s"
    if value >= 1:
        return f"{value:.2g} s"
    return f"{value * 1000:.0f} ms"


def _number(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.2f}".rstrip("0").rstrip(".")


def fmt(value: float | None, unit: str) -> str:
    """One value in a unit: 0-1 shares as %, ratios of two things as ×, seconds as the diagnosis writes them."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit in ("ratio", "pct", "share"):
        return f"{value * 100:.0f}%"
    if unit == "times":
        return f"×{value:.2f}"
    if unit == "cores":
        return f"{value:.2f} cores"
    if unit == "bytes":
        return f"{value / 2**30:.1f} GiB"
    if unit == "bytes_per_second":
        return f"{value / 2**20:.0f} MiB/s"
    if unit == "hertz":
        return f"{value / 1e6:.0f} MHz"
    if unit in ("watts",):
        return f"{value:.0f} W"
    if unit == "seconds":
        return fmt_seconds(value)
    if unit == "celsius":
        return f"{value:.0f} C"
    if unit == "rate":
        return f"{_number(value)}/s"
    return _number(value)


def metric_unit(name: str, unit: str) -> str:
    """The display unit of a schema metric: its own, except ``*_ratio`` metrics that are not 0-1 shares."""
    if name in MULTIPLE_RATIOS:
        return MULTIPLE_RATIOS[name]
    if name in CORE_RATIOS:
        return "cores"
    return unit


def fmt_signal(key: str, value: Any) -> str:
    """A diagnosis signal or evidence value (keyed by its expression) in the unit its expression implies."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isnan(value):
        return "-"
    k = key.lower()
    if "skew" in k:
        return fmt(value, "times")
    if "cpu_demand_ratio" in k or "llm_process_cpu_ratio" in k:
        return fmt(value, "cores")
    if k.startswith(("rate(", "deriv(")):
        return fmt(value, "rate")
    if "_seconds" in k and "timestamp" not in k:
        return fmt(value, "seconds")
    if "bytes_per_second" in k:
        return fmt(value, "bytes_per_second")
    if "share" in k or "_ratio" in k or " / " in k:
        return fmt(value, "share")
    if "hertz" in k:
        return fmt(value, "hertz")
    if "watts" in k:
        return fmt(value, "watts")
    if "celsius" in k:
        return fmt(value, "celsius")
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _from_signals(name: str, signals: dict[str, Any] | None) -> str | None:
    """The metric as the diagnosis judged it, or None if it has no such signal."""
    if not signals or name not in SIGNAL_OF:
        return None
    keys, how = SIGNAL_OF[name]
    for key in keys:
        value = signals.get(key)
        if isinstance(value, (int, float)) and not math.isnan(value):
            if how == "p95":
                return f"{fmt_seconds(value)} p95"
            return fmt(value, how)
    return None


def layer_rows(now: Reading, before: Reading | None, signals: dict[str, Any] | None = None) -> dict[str, list[tuple[str, str]]]:
    """Per bottleneck layer, (metric, shown value) rows for every schema metric the exporter serves.

    Where the diagnosis judged the same quantity (``signals``, from ``/diagnosis?signals=1``) its
    value is shown; otherwise the metric itself: gauges as served, counters as a rate between the
    two readings, histograms as the mean between them (since start when nothing finished between).
    """
    from exporter.schema import LAYERS

    rows: dict[str, list[tuple[str, str]]] = {layer: [] for layer in LAYERS}
    dt = (now.at - before.at) if before else 0.0
    for name, spec in SPECS.items():
        if spec.layer not in rows or spec.type == "info" or name.endswith("_info"):
            continue
        present = name in now.hists if spec.type == "histogram" else bool(now.values.get(name))
        if not present:
            continue
        shown = _from_signals(name, signals)
        if shown is not None:
            pass
        elif spec.type == "histogram":
            total, count = now.hists[name]
            unit = spec.unit if spec.unit == "seconds" else ""
            if before and name in before.hists and count - before.hists[name][1] > 0:
                d_total, d_count = total - before.hists[name][0], count - before.hists[name][1]
                shown = fmt(d_total / d_count, unit) + " avg"
            elif count > 0:
                shown = fmt(total / count, unit) + (" avg since start" if before else " avg")
            else:
                shown = "no observation yet"
        elif spec.type == "counter":
            value = now.total(name)
            assert value is not None
            prev = before.total(name) if before else None
            shown = fmt((value - prev) / dt, "rate") if prev is not None and dt > 0 else fmt(value, "")
        else:
            series = now.values[name]
            unit = metric_unit(name, spec.unit)
            if "reason" in spec.labels:
                active = [labels.get("reason", "") for labels, v in series if v]
                shown = ",".join(sorted(set(active))) or "none"
            elif len(series) > 1 and spec.labels[:1] in (("gpu",), ("group",)):
                key = spec.labels[0]
                ordered = sorted(series, key=lambda s: s[0].get(key, ""))
                texts = [fmt(v, unit) for _, v in ordered]
                shown = f"{texts[0]} (all {len(texts)})" if len(set(texts)) == 1 else " ".join(texts)
            else:
                shown = fmt(now.figure(name), unit)
        rows[spec.layer].append((name.removeprefix("llm_"), shown))
    if signals and isinstance(signals.get(SPEC_ACCEPTANCE), (int, float)):
        rows["speculative_decoding"].append(("spec_decode_acceptance", fmt(signals[SPEC_ACCEPTANCE], "share")))
    return rows


def plain_line(
    elapsed: float,
    scenario: str,
    now: Reading,
    before: Reading | None,
    verdict: str,
    load: str,
    signals: dict[str, Any] | None = None,
) -> str:
    parts = [f"t={elapsed:.0f}s", scenario]
    dt = (now.at - before.at) if before else 0.0
    for label, name, how, key in PLAIN_FIELDS:
        value = signals.get(key) if signals and key else None
        if how == "p95":
            shown = _from_signals(name, signals)
            shown = shown.removesuffix(" p95") if shown else "-"
        elif how == "rate" and not isinstance(value, (int, float)):
            value, prev = now.total(name), (before.total(name) if before else None)
            shown = fmt((value - prev) / dt, "") if value is not None and prev is not None and dt > 0 else "-"
        elif how == "rate":
            shown = fmt(value, "")
        else:  # a gauge: the diagnosis' value, else the metric reduced as the schema says
            unit = metric_unit(name, SPECS[name].unit)
            shown = fmt(value if isinstance(value, (int, float)) else now.figure(name), "share" if unit == "ratio" else unit)
        parts.append(f"{label}={shown}")
    parts.append(f"load[{load}]")
    parts.append(f"verdict: {verdict}")
    return " ".join(parts)


def verdict_text(diagnosis: dict[str, Any] | None) -> str:
    """One line: the state, and in trouble the primary with its confidence and chain."""
    if diagnosis is None:
        return "n/a (no /diagnosis)"
    state = str(diagnosis.get("state", "unknown"))
    primary = diagnosis.get("primary")
    if primary:
        return (
            f"{state}: {primary.get('layer')}/{primary.get('cause')} "
            f"(confidence {primary.get('confidence', 0):.2f}): {primary.get('chain', '')}"
        )
    if state == "healthy":
        warnings = [b for b in diagnosis.get("bottlenecks") or [] if b.get("role") == "warning"]
        extra = "; warning: " + ", ".join(f"{b.get('layer')}/{b.get('cause')}" for b in warnings) if warnings else ""
        return "healthy: no symptom" + extra
    if state == "degraded":
        symptoms = [str(x.get("text") or x.get("id")) for x in diagnosis.get("symptoms") or []]
        return "degraded: no primary cause found" + (f" ({'; '.join(symptoms)})" if symptoms else "")
    notices = diagnosis.get("notices") or []
    return "unknown: " + (notices[0] if notices else "nothing measured yet")


def primary_name(diagnosis: dict[str, Any] | None) -> str | None:
    p = (diagnosis or {}).get("primary")
    return f"{p.get('layer')}/{p.get('cause')}" if p else None


def conclusion_line(diagnosis: dict[str, Any] | None) -> str:
    """``verdict: <state> primary <layer/cause> (confidence x.xx): <chain>``."""
    if diagnosis is None:
        return "verdict: unknown primary none: no verdict from /diagnosis"
    state = str(diagnosis.get("state", "unknown"))
    p = diagnosis.get("primary")
    if p:
        return (
            f"verdict: {state} primary {p.get('layer')}/{p.get('cause')} "
            f"(confidence {float(p.get('confidence') or 0):.2f}): {p.get('chain', '')}"
        )
    return f"verdict: {state} primary none: {verdict_text(diagnosis).partition(': ')[2]}"


@dataclass
class Conclusion:
    """What the verdict said about one scenario of the tour."""

    scenario: str
    expected: str | None
    verdict: dict[str, Any] | None
    named: str | None
    share: tuple[int, int] = (0, 0)

    @property
    def matched(self) -> bool:
        if self.verdict is None:
            return False
        if self.expected is None:
            return self.named is None and self.verdict.get("state") == "healthy"
        return self.named == self.expected


def conclude(scenario: str, verdicts: list[dict[str, Any]]) -> Conclusion:
    """The verdict of a scenario: the primary named most often over the second half of its
    verdicts (ties: the latest), as its latest verdict naming it said it."""
    expected = EXPECTED_PRIMARY.get(scenario)
    if not verdicts:
        return Conclusion(scenario, expected, None, None)
    half = verdicts[len(verdicts) // 2 :]
    names = [primary_name(v) for v in half]
    counts = Counter(names)
    last_at = {name: i for i, name in enumerate(names)}
    best = max(counts, key=lambda n: (counts[n], last_at[n]))
    chosen = half[last_at[best]]
    return Conclusion(scenario, expected, chosen, best, (counts[best], len(half)))


def summary_lines(results: list[Conclusion]) -> list[str]:
    """The tour's closing table, plain text."""
    rows = [("scenario", "expected primary", "primary named", "match")]
    for r in results:
        rows.append(
            (
                r.scenario,
                r.expected or "none (healthy)",
                r.named or (f"none ({r.verdict.get('state')})" if r.verdict else "no verdict"),
                "yes" if r.matched else "NO",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    matched = sum(r.matched for r in results)
    if not results:
        return ["tour summary: no scenario ran to its end"]
    out = [f"tour summary: {matched} of {len(results)} scenarios read as expected"]
    out += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    return out


def injected_text(scenario: Any) -> str:
    """What the scenario changes and the load it drives, in one line."""
    knobs = " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in scenario.settings.items())
    load = scenario.load
    clients = (
        f"arrivals at {load.rate:g}/s (at most {load.concurrency} at once)"
        if load.rate
        else f"{load.concurrency} clients back to back"
    )
    prompts = "/".join(str(n) for n, _ in load.prompt_tokens)
    outputs = "/".join(str(n) for n, _ in load.max_tokens)
    extra = f", timeout {load.timeout_s:g} s with {load.retries} retries" if load.retries else ""
    return (
        f"injected: {knobs or 'nothing (defaults)'}; load: {clients}, prompts {prompts} tokens, outputs {outputs} tokens{extra}"
    )


# --------------------------------------------------------------------------- the children


def exporter_command(listen: str, sim_url: str, sim_pid: int, interval: float, config: Path | None = None) -> list[str]:
    return [
        sys.executable,
        "-m",
        "exporter",
        "serve",
        "--listen-address",
        listen,
        "--engine",
        f"{sim_url}/metrics",
        "--gpu-source",
        f"sim:{sim_url}",
        "--engine-pid",
        str(sim_pid),
        "--engine-interval",
        f"{interval:g}",
        "--gpu-interval",
        f"{interval:g}",
        "--process-interval",
        f"{interval:g}",
        "--log-level",
        "warning",
    ] + (["--config", str(config)] if config else [])


@dataclass
class ExporterFailure:
    """Why the exporter did not start: one line to print, and the demo's exit status."""

    message: str
    status: int = EXIT_CHILD_FAILED


def start_exporter(
    listen: str, sim_url: str, sim_pid: int, interval: float, log_path: Path, timeout: float = 30.0, config: Path | None = None
) -> tuple[subprocess.Popen[bytes] | None, str]:
    """Start ``exporter serve``; returns (process or None, a problem description or '')."""
    proc, failure = _start_exporter(listen, sim_url, sim_pid, interval, log_path, timeout, config)
    return proc, failure.message if failure else ""


def _start_exporter(
    listen: str, sim_url: str, sim_pid: int, interval: float, log_path: Path, timeout: float, config: Path | None
) -> tuple[subprocess.Popen[bytes] | None, ExporterFailure | None]:
    import httpx

    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    from exporter.simulator.process import die_with_parent

    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            exporter_command(listen, sim_url, sim_pid, interval, config),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=die_with_parent,
        )
    url = f"http://{listen}/metrics"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
            last = lines[-1].removeprefix("llm-layer-exporter serve: ") if lines else "no output"
            status = EXIT_CANNOT_LISTEN if proc.returncode == EXIT_CANNOT_LISTEN else EXIT_CHILD_FAILED
            return None, ExporterFailure(f"the exporter did not start (exit status {proc.returncode}): {last}", status)
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return proc, None
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop_process(proc)
    return None, ExporterFailure(f"the exporter did not answer on {url} within {timeout:g} s")


def stop_process(proc: subprocess.Popen[Any] | None, timeout: float = 10.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


class ChildFailed(Exception):
    """A child process the demo needs stopped working; the message is the one line to print."""


# --------------------------------------------------------------------------- the loop


@dataclass
class LoadStats:
    """Client-side view of the load since the last refresh."""

    ok: int = 0
    failed: int = 0

    def add(self, rec: Any) -> None:
        if rec.status == "ok":
            self.ok += 1
        elif rec.status != "cancelled":
            self.failed += 1

    def take(self, dt: float) -> str:
        text = f"{self.ok / dt if dt else 0:.1f} req/s, {self.failed} failed"
        self.ok, self.failed = 0, 0
        return text


class Loads:
    """The loads: the first runs until the end; the tour adds each scenario's load for its time,
    then lets it drain (stopping a load cancels its requests, which the server counts as aborts)."""

    def __init__(self, sim_url: str, time_scale: float, stats: LoadStats) -> None:
        self.sim_url, self.time_scale, self.stats = sim_url, time_scale, stats
        self.runs: list[tuple[str, asyncio.Event, asyncio.Task[Any]]] = []

    def start(self, name: str, duration_s: float | None = None) -> None:
        """Add the scenario's load; with ``duration_s`` it stops issuing then and lets what is in flight finish."""
        import dataclasses

        from exporter.loadgen import run_load
        from exporter.simulator import scenarios

        spec = scenarios.get(name).load_spec(self.sim_url, time_scale=self.time_scale, duration_s=duration_s, seed=len(self.runs))
        spec = dataclasses.replace(spec, drain=duration_s is not None)
        stop = asyncio.Event()
        self.runs.append((name, stop, asyncio.create_task(run_load(spec, stop=stop, on_record=self.stats.add))))

    def check(self) -> bool:
        """Raise a load's failure; False once the first (never-ending) load ended by itself."""
        for _, _, task in self.runs:
            if task.done() and not task.cancelled() and task.exception() is not None:
                task.result()
        return not (self.runs and self.runs[0][2].done())

    async def close(self) -> None:
        for _, stop, _ in self.runs:
            stop.set()
        tasks = [t for _, _, t in self.runs]
        if not tasks:
            return
        try:
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            for task in tasks:
                task.cancel()


class _TimeUp(Exception):
    pass


class Session:
    """The view loop: reads the exporter each interval, shows it, and (the tour) drives the scenarios."""

    def __init__(
        self,
        args: argparse.Namespace,
        sim_url: str,
        exporter_url: str,
        exporter: subprocess.Popen[bytes] | None,
        results: list[Conclusion],
    ) -> None:
        self.args, self.sim_url, self.exporter_url, self.exporter = args, sim_url, exporter_url, exporter
        self.results = results
        self.tour = args.scenario is None
        self.plain = args.no_tui or not sys.stdout.isatty()
        self.stats = LoadStats()
        self.loads = Loads(sim_url, args.time_scale, self.stats)
        self.start = time.monotonic()
        self.before: Reading | None = None
        self.last = self.start
        self.last_tick_line = -math.inf
        self.live: Any = None
        self.scenario = args.scenario or "healthy"
        self.tour_text = ""
        self.client: Any = None

    # ------------------------------------------------------------------ output

    def say(self, text: str = "") -> None:
        """A transcript line (above the live view on a terminal)."""
        if self.live is not None:
            self.live.console.print(text, markup=False, highlight=False)
        else:
            print(text, flush=True)

    def say_wrapped(self, text: str, indent: str = "   ") -> None:
        if self.live is not None:
            self.say(indent + text)  # rich wraps it
        else:
            for line in textwrap.wrap(
                text,
                width=100,
                initial_indent=indent,
                subsequent_indent=indent + "  ",
                break_long_words=False,
                break_on_hyphens=False,
            ) or [indent]:
                self.say(line)

    # ------------------------------------------------------------------ one refresh

    async def tick(self) -> dict[str, Any] | None:
        await asyncio.sleep(self.args.interval)
        elapsed = time.monotonic() - self.start
        if self.args.duration is not None and elapsed >= self.args.duration:
            raise _TimeUp
        if self.exporter is not None and self.exporter.poll() is not None:
            raise ChildFailed(f"the exporter stopped (exit status {self.exporter.returncode})")
        if not self.loads.check():
            raise _TimeUp
        now_t = time.monotonic()
        load_text = self.stats.take(now_t - self.last)
        self.last = now_t
        now, diagnosis, note = await _read(self.client, self.exporter_url)
        signals = (diagnosis or {}).get("signals")
        if self.plain:
            every = TOUR_TICK_SECONDS if self.tour else 0.0
            if elapsed - self.last_tick_line >= every - 1e-6:
                self.last_tick_line = elapsed
                line = plain_line(elapsed, self.scenario, now, self.before, verdict_text(diagnosis), load_text, signals)
                print(line + (f" [{note}]" if note else ""), flush=True)
        elif self.live is not None:
            self.live.update(
                _render(
                    self.args,
                    elapsed,
                    now,
                    self.before,
                    diagnosis,
                    load_text,
                    note,
                    scenario=self.scenario,
                    tour=self.tour_text,
                    results=self.results,
                )
            )
        self.before = now
        return diagnosis

    async def run(self) -> None:
        import httpx

        self.loads.start(self.scenario)
        if not self.plain:
            from rich.console import Console
            from rich.live import Live

            self.live = Live(console=Console(), refresh_per_second=4, transient=False)
            self.live.start()
        try:
            async with httpx.AsyncClient(timeout=max(2.0, self.args.interval)) as client:
                self.client = client
                try:
                    await (self._tour() if self.tour else self._one())
                except _TimeUp:
                    if self.tour:
                        self.finish([f"tour stopped at --duration {self.args.duration:g} s"] + summary_lines(self.results))
        finally:
            await self.loads.close()
            if self.live is not None:
                self.live.stop()
                self.live = None

    async def _one(self) -> None:
        while True:
            await self.tick()

    # ------------------------------------------------------------------ the tour

    async def _switch(self, name: str, load_seconds: float | None = None) -> None:
        """The simulator to ``name``, and (unless healthy, whose load runs throughout) its load for
        ``load_seconds``, after which that load drains: nothing is cancelled, so no abort shows up
        as a failure in the verdict on the way back to healthy."""
        resp = await self.client.post(self.sim_url + "/sim/scenario", json={"scenario": name})
        if resp.status_code != 200:
            raise ChildFailed(f"the simulator refused scenario {name}: {resp.text[:200]}")
        if name != "healthy":
            self.loads.start(name, load_seconds)
        self.scenario = name

    async def _tour(self) -> None:
        from exporter.simulator import scenarios

        names = self.args.tour_names
        seconds = self.args.tour_seconds
        self.say(
            f"tour: {', '.join(names)} — {seconds:g} s each, back to healthy in between (up to "
            f"{QUIET_MAX_SECONDS:g} s); `demo --scenario NAME` runs one of them until Ctrl-C"
        )
        for i, name in enumerate(names, 1):
            scenario = scenarios.get(name)
            if self.scenario != "healthy":
                await self._back_to_healthy()
            switched_at = time.time()
            if name != self.scenario:
                await self._switch(name, seconds)
            self.tour_text = f"tour {i}/{len(names)}: {name} — {scenario.summary}"
            self.say("")
            self.say(f"== {i}/{len(names)} {name}: {scenario.summary}")
            self.say_wrapped(injected_text(scenario))
            expected = EXPECTED_PRIMARY.get(name)
            self.say_wrapped(f"the diagnosis should name: {expected or 'nothing (healthy)'}")
            verdicts: list[dict[str, Any]] = []
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                d = await self.tick()
                if (
                    d
                    and float(d.get("timestamp") or 0) > switched_at
                    and (not verdicts or d.get("timestamp") != verdicts[-1].get("timestamp"))
                ):
                    verdicts.append(d)
            result = conclude(name, verdicts)
            self.results.append(result)
            self.say(conclusion_line(result.verdict))
            held = f"in {result.share[0]} of the last {result.share[1]} verdicts" if result.share[1] else "no verdict"
            self.say_wrapped(f"expected {expected or 'healthy'}: {'matched' if result.matched else 'NOT matched'} ({held})")
            advice = ((result.verdict or {}).get("primary") or {}).get("advice")
            if advice:
                self.say_wrapped(f"advice: {advice}")
        self.finish(summary_lines(self.results))

    def finish(self, lines: list[str]) -> None:
        """The closing lines, after the live view (so they are the last thing on the screen)."""
        if self.live is not None:
            self.live.stop()
            self.live = None
        print("\n".join([""] + lines), flush=True)

    async def _back_to_healthy(self) -> None:
        """Healthy again (the scenario's load drains by itself) until the diagnosis reports nothing for a few cycles."""
        left = self.scenario
        await self._switch("healthy")
        self.tour_text = f"tour: back to healthy after {left}"
        began = time.monotonic()
        quiet, last = 0, None
        while quiet < QUIET_CYCLES and time.monotonic() - began < QUIET_MAX_SECONDS:
            d = await self.tick()
            if d and d.get("timestamp") != last:
                last = d.get("timestamp")
                quiet = quiet + 1 if not d.get("bottlenecks") and d.get("state") != "degraded" else 0
        took = time.monotonic() - began
        self.say(
            f"-- back to healthy after {left}: "
            + (f"quiet after {took:.0f} s" if quiet >= QUIET_CYCLES else f"not yet quiet after {took:.0f} s; going on")
        )


async def _read(client: Any, exporter_url: str) -> tuple[Reading, dict[str, Any] | None, str]:
    """The exporter's metrics and verdict (with the signals it judged)."""
    import httpx

    try:
        resp = await client.get(exporter_url + "/metrics")
        reading = reading_of(resp.text)
    except (httpx.HTTPError, ValueError) as err:
        return Reading(at=time.monotonic()), None, f"exporter unreachable: {type(err).__name__}"
    diagnosis = None
    try:
        d = await client.get(exporter_url + "/diagnosis", params={"signals": "1"})
        if d.status_code == 200:
            diagnosis = d.json()
    except (httpx.HTTPError, ValueError):
        pass
    return reading, diagnosis, ""


def _render(
    args: argparse.Namespace,
    elapsed: float,
    now: Reading,
    before: Reading | None,
    diagnosis: dict[str, Any] | None,
    load_text: str,
    note: str,
    scenario: str | None = None,
    tour: str = "",
    results: list[Conclusion] | None = None,
) -> Any:
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    layers = diagnosis.get("layers", {}) if diagnosis else {}
    signals = diagnosis.get("signals") if diagnosis else None
    table = Table(expand=True, show_lines=False)
    table.add_column("layer", style="bold", overflow="fold")
    table.add_column("status", overflow="fold", ratio=1)
    table.add_column("metrics", overflow="fold", ratio=3)
    rows_by_layer = layer_rows(now, before, signals)
    for layer, rows in rows_by_layer.items():
        rows = [(n, v) for n, v in rows if n not in TUI_HIDDEN]
        info = layers.get(layer) or {}
        status = info.get("status", "not judged" if diagnosis else "no verdict yet")
        score = info.get("score")
        status_text = f"{status} {score:.2f}" if isinstance(score, (int, float)) else str(status)
        room = info.get("headroom")
        if isinstance(room, (int, float)):
            status_text += f" · {fmt(room, 'share')} headroom"
        cells = "  ".join(f"{name}={value}" for name, value in rows) or "no metric served"
        table.add_row(layer, status_text, Text(cells))
    name = scenario or args.scenario
    header = Text.assemble("scenario ", (str(name), "bold"), f" · dialect {args.dialect} · {elapsed:.0f}s · load: {load_text}")
    parts: list[Any] = [header]
    if tour:
        parts.append(Text(tour, style="cyan"))
    if results:
        parts.append(
            Text(
                "tour so far: "
                + " · ".join(
                    f"{r.scenario} -> {r.named or 'healthy'} ({'as expected' if r.matched else 'NOT as expected'})"
                    for r in results
                )
            )
        )
    parts.append(Panel(Text(verdict_text(diagnosis)), title="verdict"))
    if diagnosis and diagnosis.get("primary"):
        advice = str(diagnosis["primary"].get("advice") or "")
        if advice:
            parts.append(Text(advice, style="dim"))  # rich wraps it: never cut
    parts.append(table)
    if diagnosis:
        others = [b for b in diagnosis.get("bottlenecks") or [] if b.get("role") != "primary"]
        for b in others[:3]:
            parts.append(
                Text(
                    f"• {b.get('role', 'warning')} {b.get('layer')}/{b.get('cause')}: "
                    f"{b.get('summary') or _evidence(b.get('evidence'))}"
                )
            )
    if note:
        parts.append(Text(note, style="yellow"))
    return Panel(Group(*parts), title="llm-layer-exporter demo (Ctrl-C to stop)")


def _evidence(evidence: Any) -> str:
    """The first few evidence values, compact, each in its unit (the diagnosis gives expression -> value)."""
    if isinstance(evidence, dict):
        items = list(evidence.items())[:4]
        return ", ".join(f"{k}={fmt_signal(k, v)}" for k, v in items)
    return str(evidence or "")


def _tour_names(args: argparse.Namespace) -> list[str]:
    from exporter.errors import UsageError
    from exporter.simulator.scenarios import NAMES

    if args.tour is None:
        return list(TOUR)
    names = [n.strip() for n in args.tour.split(",") if n.strip()]
    unknown = [n for n in names if n not in NAMES]
    if unknown or not names:
        raise UsageError(f"--tour: unknown scenario {', '.join(unknown) or '(none given)'}; expected some of {', '.join(NAMES)}")
    return ["healthy"] + [n for i, n in enumerate(names) if n != "healthy" and n not in names[:i]]


def _check_listen(listen: str) -> None:
    """Fail before anything starts when the exporter could not listen there."""
    from exporter.commands.serve import CannotListen, bind_listen_socket
    from exporter.config import split_listen_address

    host, port = split_listen_address(listen)
    try:
        bind_listen_socket(host, port, listen).close()
    except CannotListen as err:
        raise ChildFailed(f"{err} (pick another with --listen-address)") from None


def run(args: argparse.Namespace) -> int:
    import tempfile

    from exporter.errors import UsageError
    from exporter.simulator.process import SimulatorProcess

    if args.duration is not None and not args.duration > 0:
        raise UsageError("--duration: expected a positive number of seconds")
    tour = args.scenario is None
    if args.time_scale is None:
        args.time_scale = TOUR_TIME_SCALE if tour else 1.0
    if not args.interval > 0 or not args.time_scale > 0:
        raise UsageError("--interval and --time-scale: expected positive numbers")
    if not args.tour_seconds > 0:
        raise UsageError("--tour-seconds: expected a positive number of seconds")
    if args.tour is not None and not tour:
        raise UsageError("--tour: only without --scenario (the tour visits several scenarios)")
    args.tour_names = _tour_names(args) if tour else []
    _, sep, port = args.listen_address.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"--listen-address: expected HOST:PORT, got {args.listen_address!r}")
    if int(port) == 0:
        raise UsageError("--listen-address: the demo reads its exporter there, so it needs a port other than 0")
    try:
        _check_listen(args.listen_address)
    except ChildFailed as err:
        print(f"llm-layer-exporter demo: error: {err}", file=sys.stderr, flush=True)
        return EXIT_CANNOT_LISTEN
    settings: dict[str, Any] = {"time_scale": args.time_scale}
    gpus = args.gpus if args.gpus is not None else (TOUR_GPUS if tour else None)
    if gpus is not None:
        settings["gpus"] = gpus
    first = "healthy" if tour else args.scenario
    sim = SimulatorProcess(first, args.dialect, settings)
    exporter: subprocess.Popen[bytes] | None = None
    results: list[Conclusion] = []

    def on_sigterm(*_: object) -> None:
        raise KeyboardInterrupt  # unwinds into the finally below, which stops the children

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    status = 0
    with tempfile.TemporaryDirectory(prefix="llm-demo-") as tmp:
        try:
            sim.start()
            print(
                f"simulator ({first}, {args.dialect}) on {sim.base_url}, pid {sim.pid}, "
                f"{gpus or 'the scenario’s'} GPU(s), time scale {args.time_scale:g}",
                flush=True,
            )
            config = None
            if tour:  # the window the scenario proofs use: each scenario's data drains in seconds
                config = Path(tmp) / "exporter.yaml"
                config.write_text(f"diagnosis:\n  window_seconds: {TOUR_WINDOW_SECONDS}\n")
            exporter, failure = _start_exporter(
                args.listen_address, sim.base_url, sim.pid, args.interval, Path(tmp) / "exporter.log", 30.0, config
            )
            if failure is not None:
                print(f"llm-layer-exporter demo: error: {failure.message}", file=sys.stderr, flush=True)
                return failure.status
            exporter_url = f"http://{args.listen_address}"
            print(f"exporter on {exporter_url}/metrics (verdict at {exporter_url}/diagnosis)", flush=True)
            if not tour:
                from exporter.simulator import scenarios

                print(
                    f"scenario {args.scenario}: {scenarios.get(args.scenario).summary}; other scenarios: "
                    f"--scenario NAME (`simulate --list-scenarios`), or no --scenario for the tour",
                    flush=True,
                )
            asyncio.run(Session(args, sim.base_url, exporter_url, exporter, results).run())
        except KeyboardInterrupt:
            if tour and results:
                print("\n".join(["", "tour stopped early"] + summary_lines(results)), flush=True)
        except (RuntimeError, ChildFailed) as err:
            print(f"llm-layer-exporter demo: error: {err}", file=sys.stderr, flush=True)
            status = EXIT_CHILD_FAILED
        finally:
            signal.signal(signal.SIGTERM, previous)
            stop_process(exporter)
            sim.stop()
    return status
