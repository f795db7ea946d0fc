"""``llm-layer-exporter demo``: simulator + load + exporter on 127.0.0.1, with a live view.

Why this shape: it is the README's first command and must work right after
``pip install .`` on a laptop with no GPU and no inference server. It starts
three real things — the simulated server (a child process, so the exporter's
process sampler can watch its scheduler thread), the exporter (``python -m
exporter serve`` reading the simulator's ``/metrics`` and ``/sim/gpu``) and an
asynchronous load — then renders the exporter's own ``/metrics``, layer by
layer, and the verdict of ``/diagnosis`` once it answers. If the exporter
cannot start, the view falls back to the simulator's own state and says so.
Every child is stopped on exit (Ctrl-C, ``--duration``, or an error).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_LISTEN = "127.0.0.1:9750"
#: One line per layer in --no-tui mode: (label, metric, how to show it).
PLAIN_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("running", "llm_scheduler_requests_running", "sum"),
    ("waiting", "llm_scheduler_requests_waiting", "sum"),
    ("kv", "llm_kv_cache_usage_ratio", "pct"),
    ("preempt/s", "llm_kv_cache_preemptions_total", "rate"),
    ("sm", "llm_gpu_sm_active_ratio", "pct"),
    ("dram", "llm_gpu_dram_active_ratio", "pct"),
    ("power", "llm_gpu_power_watts", "watts"),
    ("cpu_thread", "llm_process_busiest_thread_cpu_ratio", "pct"),
    ("tok/s", "llm_generation_tokens_total", "rate"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from exporter.simulator.scenarios import NAMES
    from exporter.simulator.settings import DIALECTS

    parser.add_argument("--scenario", default="healthy", choices=NAMES, help="bottleneck scenario to simulate (default healthy)")
    parser.add_argument("--dialect", default="vllm", choices=DIALECTS, help="engine whose /metrics the simulator speaks (default vllm)")
    parser.add_argument("--listen-address", default=DEFAULT_LISTEN, help=f"where the exporter serves (default {DEFAULT_LISTEN})")
    parser.add_argument("--duration", type=float, default=None, metavar="S", help="stop after S seconds (default: until Ctrl-C)")
    parser.add_argument("--no-tui", action="store_true", help="print one plain line per interval instead of the live view")
    parser.add_argument("--interval", type=float, default=1.0, metavar="S", help="refresh interval in seconds (default 1)")
    parser.add_argument("--time-scale", type=float, default=1.0, metavar="X", help="simulator speed-up (default 1)")
    parser.add_argument("--gpus", type=int, default=None, metavar="N", help="simulated GPUs (default: the scenario's)")


# --------------------------------------------------------------------------- reading metrics


@dataclass
class Reading:
    """One parse of the exporter's /metrics: name -> [(labels, value)], histograms as (sum, count)."""

    at: float
    values: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    hists: dict[str, tuple[float, float]] = field(default_factory=dict)

    def total(self, name: str) -> float | None:
        series = self.values.get(name)
        return None if not series else sum(v for _, v in series)

    def mean(self, name: str) -> float | None:
        series = self.values.get(name)
        return None if not series else sum(v for _, v in series) / len(series)


def parse_metrics(text: str) -> Reading:
    from prometheus_client.parser import text_string_to_metric_families

    reading = Reading(at=time.monotonic())
    for family in text_string_to_metric_families(text):
        if family.type == "histogram":
            total = sum(s.value for s in family.samples if s.name.endswith("_sum"))
            count = sum(s.value for s in family.samples if s.name.endswith("_count"))
            reading.hists[family.name] = (total, count)
            continue
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            reading.values.setdefault(s.name, []).append((dict(s.labels), s.value))
    return reading


def fmt(value: float | None, unit: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit in ("ratio", "pct"):
        return f"{value * 100:.0f}%"
    if unit == "bytes":
        return f"{value / 2**30:.1f} GiB"
    if unit == "bytes_per_second":
        return f"{value / 2**20:.0f} MiB/s"
    if unit == "hertz":
        return f"{value / 1e6:.0f} MHz"
    if unit in ("watts",):
        return f"{value:.0f} W"
    if unit == "seconds":
        return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"
    if unit == "celsius":
        return f"{value:.0f} C"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.2f}".rstrip("0").rstrip(".")


def layer_rows(now: Reading, before: Reading | None) -> dict[str, list[tuple[str, str]]]:
    """Per bottleneck layer, (metric, shown value) rows for every schema metric the exporter serves."""
    from exporter.schema import LAYERS, SPECS

    rows: dict[str, list[tuple[str, str]]] = {layer: [] for layer in LAYERS}
    dt = (now.at - before.at) if before else 0.0
    for name, spec in SPECS.items():
        if spec.layer not in rows or spec.type == "info" or name.endswith("_info"):
            continue
        if spec.type == "histogram":
            if name not in now.hists:
                continue
            total, count = now.hists[name]
            if before and name in before.hists:
                total, count = total - before.hists[name][0], count - before.hists[name][1]
            shown = fmt(total / count, "seconds") + " avg" if count > 0 else "-"
        elif spec.type == "counter":
            value = now.total(name)
            if value is None:
                continue
            prev = before.total(name) if before else None
            shown = f"{fmt((value - prev) / dt, '')}/s" if prev is not None and dt > 0 else fmt(value, "")
        else:
            series = now.values.get(name)
            if not series:
                continue
            if "reason" in spec.labels:
                active = [labels.get("reason", "") for labels, v in series if v]
                shown = ",".join(sorted(set(active))) or "none"
            elif len(series) > 1 and spec.labels[:1] == ("gpu",):
                ordered = sorted(series, key=lambda s: s[0].get("gpu", ""))
                shown = " ".join(fmt(v, spec.unit) for _, v in ordered[:8])
            else:
                shown = fmt(sum(v for _, v in series) if spec.unit not in ("ratio",) else max(v for _, v in series), spec.unit)
        rows[spec.layer].append((name.removeprefix("llm_"), shown))
    return rows


def plain_line(elapsed: float, scenario: str, now: Reading, before: Reading | None, verdict: str, load: str) -> str:
    parts = [f"t={elapsed:.0f}s", scenario]
    dt = (now.at - before.at) if before else 0.0
    for label, name, how in PLAIN_FIELDS:
        if how == "rate":
            value, prev = now.total(name), (before.total(name) if before else None)
            shown = fmt((value - prev) / dt, "") if value is not None and prev is not None and dt > 0 else "-"
        elif how == "sum":
            shown = fmt(now.total(name), "")
        elif how == "watts":
            shown = fmt(now.mean(name), "watts")
        else:
            shown = fmt(now.mean(name), "pct")
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
        return (f"{state}: {primary.get('layer')}/{primary.get('cause')} "
                f"(confidence {primary.get('confidence', 0):.2f}): {primary.get('chain', '')}")
    if state == "healthy":
        warnings = [b for b in diagnosis.get("bottlenecks") or [] if b.get("role") == "warning"]
        extra = "; warning: " + ", ".join(f"{b.get('layer')}/{b.get('cause')}" for b in warnings) if warnings else ""
        return "healthy: no symptom" + extra
    notices = diagnosis.get("notices") or []
    return "unknown: " + (notices[0] if notices else "nothing measured yet")


# --------------------------------------------------------------------------- the children


def exporter_command(listen: str, sim_url: str, sim_pid: int, interval: float) -> list[str]:
    return [
        sys.executable, "-m", "exporter", "serve",
        "--listen-address", listen,
        "--engine", f"{sim_url}/metrics",
        "--gpu-source", f"sim:{sim_url}",
        "--engine-pid", str(sim_pid),
        "--engine-interval", f"{interval:g}",
        "--gpu-interval", f"{interval:g}",
        "--process-interval", f"{interval:g}",
        "--log-level", "warning",
    ]


def start_exporter(listen: str, sim_url: str, sim_pid: int, interval: float, log_path: Path,
                   timeout: float = 30.0) -> tuple[subprocess.Popen[bytes] | None, str]:
    """Start ``exporter serve``; returns (process or None, a problem description or '')."""
    import httpx

    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    from exporter.simulator.process import die_with_parent

    with open(log_path, "wb") as log:
        proc = subprocess.Popen(exporter_command(listen, sim_url, sim_pid, interval), stdout=log, stderr=subprocess.STDOUT,
                                env=env, preexec_fn=die_with_parent)
    url = f"http://{listen}/metrics"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            return None, f"exporter exited with status {proc.returncode}: {' | '.join(tail)}"
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return proc, ""
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop_process(proc)
    return None, f"exporter did not answer on {url} within {timeout:g} s"


def stop_process(proc: subprocess.Popen[Any] | None, timeout: float = 10.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


# --------------------------------------------------------------------------- the loop


@dataclass
class LoadStats:
    """Client-side view of the load since the last refresh."""

    ok: int = 0
    failed: int = 0
    ttfts: list[float] = field(default_factory=list)

    def add(self, rec: Any) -> None:
        if rec.status == "ok":
            self.ok += 1
            if rec.ttft_s is not None:
                self.ttfts.append(rec.ttft_s)
        elif rec.status != "cancelled":
            self.failed += 1

    def take(self, dt: float) -> str:
        from exporter.loadgen import percentile

        p50 = percentile(self.ttfts, 50)
        text = f"{self.ok / dt if dt else 0:.1f} req/s, {self.failed} failed, ttft p50 {fmt(p50, 'seconds')}"
        self.ok, self.failed, self.ttfts = 0, 0, []
        return text


async def _view_loop(args: argparse.Namespace, sim_url: str, exporter_url: str | None, problem: str) -> None:
    import httpx

    from exporter.loadgen import run_load
    from exporter.simulator import scenarios

    scenario = scenarios.get(args.scenario)
    stop = asyncio.Event()
    stats = LoadStats()
    spec = scenario.load_spec(sim_url, time_scale=args.time_scale, duration_s=None)
    load_task = asyncio.create_task(run_load(spec, stop=stop, on_record=stats.add))
    start = time.monotonic()
    before: Reading | None = None
    last = start
    live = None
    # a pipe or a log file gets plain lines: a live view only draws on a terminal
    plain = args.no_tui or not sys.stdout.isatty()
    if not plain:
        from rich.console import Console
        from rich.live import Live

        live = Live(console=Console(), refresh_per_second=4, transient=False)
        live.start()
    try:
        async with httpx.AsyncClient(timeout=max(2.0, args.interval)) as client:
            while args.duration is None or time.monotonic() - start < args.duration:
                await asyncio.sleep(args.interval)
                if load_task.done():
                    load_task.result()  # surface a load failure
                    break
                now_t = time.monotonic()
                load_text = stats.take(now_t - last)
                last = now_t
                now, diagnosis, note = await _read(client, exporter_url, sim_url)
                elapsed = now_t - start
                if plain:
                    line = plain_line(elapsed, args.scenario, now, before, verdict_text(diagnosis), load_text)
                    print(line + (f" [{note}]" if note else ""), flush=True)
                elif live is not None:
                    live.update(_render(args, elapsed, now, before, diagnosis, load_text, note or problem))
                before = now
    finally:
        stop.set()
        try:
            await asyncio.wait_for(load_task, 10)
        except Exception:
            load_task.cancel()
        if live is not None:
            live.stop()


async def _read(client: Any, exporter_url: str | None, sim_url: str) -> tuple[Reading, dict[str, Any] | None, str]:
    """The exporter's metrics and verdict; the simulator's own /metrics if the exporter is absent."""
    import httpx

    if exporter_url:
        try:
            resp = await client.get(exporter_url + "/metrics")
            reading = parse_metrics(resp.text)
        except (httpx.HTTPError, ValueError) as err:
            return Reading(at=time.monotonic()), None, f"exporter unreachable: {type(err).__name__}"
        diagnosis = None
        try:
            d = await client.get(exporter_url + "/diagnosis")
            if d.status_code == 200:
                diagnosis = d.json()
        except (httpx.HTTPError, ValueError):
            pass
        return reading, diagnosis, ""
    try:
        resp = await client.get(sim_url + "/metrics")
        return parse_metrics(resp.text), None, "exporter unavailable: engine-native metrics shown"
    except (httpx.HTTPError, ValueError) as err:
        return Reading(at=time.monotonic()), None, f"simulator unreachable: {type(err).__name__}"


def _render(args: argparse.Namespace, elapsed: float, now: Reading, before: Reading | None,
            diagnosis: dict[str, Any] | None, load_text: str, note: str) -> Any:
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table

    layers = diagnosis.get("layers", {}) if diagnosis else {}
    table = Table(expand=True, show_lines=False)
    table.add_column("layer", style="bold")
    table.add_column("status")
    table.add_column("metrics")
    for layer, rows in layer_rows(now, before).items():
        info = layers.get(layer) or {}
        status = info.get("status", "-")
        score = info.get("score")
        status_text = f"{status} {score:.2f}" if isinstance(score, (int, float)) else str(status)
        room = info.get("headroom")
        if isinstance(room, (int, float)):
            status_text += f" · {100 * room:.0f} % headroom"
        cells = "  ".join(f"{name}={value}" for name, value in rows[:10]) or "-"
        table.add_row(layer, status_text, cells)
    if not any(layer_rows(now, before).values()) and now.values:
        table.add_row("engine", "-", "  ".join(f"{k}={fmt(v[0][1], '')}" for k, v in list(now.values.items())[:12]))
    header = f"scenario [bold]{args.scenario}[/] · dialect {args.dialect} · {elapsed:.0f}s · load: {load_text}"
    verdict = verdict_text(diagnosis)
    parts: list[Any] = [header, Panel(verdict, title="verdict")]
    if diagnosis and diagnosis.get("primary"):
        advice = str(diagnosis["primary"].get("advice") or "")
        if advice:
            parts.append(f"[dim]{advice}[/]")  # rich wraps it: never cut
    parts.append(table)
    if diagnosis:
        others = [b for b in diagnosis.get("bottlenecks") or [] if b.get("role") != "primary"]
        for b in others[:3]:
            parts.append(f"• {b.get('role', 'warning')} {b.get('layer')}/{b.get('cause')}: "
                         f"{b.get('summary') or _evidence(b.get('evidence'))}")
    if note:
        parts.append(f"[yellow]{note}[/]")
    return Panel(Group(*parts), title="llm-layer-exporter demo (Ctrl-C to stop)")


def _evidence(evidence: Any) -> str:
    """The first few evidence values, compact (the diagnosis gives a mapping of expression -> value)."""
    if isinstance(evidence, dict):
        items = list(evidence.items())[:4]
        return ", ".join(f"{k}={v:.3g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in items)
    return str(evidence or "")


def run(args: argparse.Namespace) -> int:
    import tempfile

    from exporter.cli import UsageError
    from exporter.simulator.process import SimulatorProcess

    if args.duration is not None and not args.duration > 0:
        raise UsageError("--duration: expected a positive number of seconds")
    if not args.interval > 0 or not args.time_scale > 0:
        raise UsageError("--interval and --time-scale: expected positive numbers")
    _, sep, port = args.listen_address.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"--listen-address: expected HOST:PORT, got {args.listen_address!r}")
    settings: dict[str, Any] = {"time_scale": args.time_scale}
    if args.gpus is not None:
        settings["gpus"] = args.gpus
    sim = SimulatorProcess(args.scenario, args.dialect, settings)
    exporter: subprocess.Popen[bytes] | None = None

    def on_sigterm(*_: object) -> None:
        raise KeyboardInterrupt  # unwinds into the finally below, which stops the children

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    with tempfile.TemporaryDirectory(prefix="llm-demo-") as tmp:
        try:
            sim.start()
            print(f"simulator ({args.scenario}, {args.dialect}) on {sim.base_url}, pid {sim.pid}", flush=True)
            exporter, problem = start_exporter(args.listen_address, sim.base_url, sim.pid, args.interval,
                                               Path(tmp) / "exporter.log")
            exporter_url = f"http://{args.listen_address}" if exporter else None
            if exporter_url:
                print(f"exporter on {exporter_url}/metrics (verdict at {exporter_url}/diagnosis)", flush=True)
            else:
                print(f"warning: {problem}; showing the simulator's own metrics", file=sys.stderr, flush=True)
            asyncio.run(_view_loop(args, sim.base_url, exporter_url, problem))
        except KeyboardInterrupt:
            pass
        except RuntimeError as err:
            print(f"llm-layer-exporter demo: error: {err}", file=sys.stderr)
            return 1
        finally:
            signal.signal(signal.SIGTERM, previous)
            stop_process(exporter)
            sim.stop()
    return 0
