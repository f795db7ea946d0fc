"""The transcript's plain lines: one progress line per refresh, what a scenario injects, wrapped text.

Why plain text has its own room: a pipe or a log file gets these lines instead of the live
view (tests/simulator/test_demo_tour.py reads them), so each field must read the same as the
view's value for it (exporter/demo/rows.py) and never ``-`` when a value exists.
"""

from __future__ import annotations

import textwrap
from typing import Any

from exporter.demo.readings import Reading
from exporter.demo.rows import from_signals
from exporter.demo.units import fmt, metric_unit
from exporter.schema import SPECS, reduced_name

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


def plain_line(
    elapsed: float,
    scenario: str,
    now: Reading,
    before: Reading | None,
    verdict: str,
    load: str,
    signals: dict[str, Any] | None = None,
) -> str:
    """``t=12s scenario running=.. waiting=.. ... load[..] verdict: ..``: one refresh in one line."""
    parts = [f"t={elapsed:.0f}s", scenario]
    dt = (now.at - before.at) if before else 0.0
    for label, name, how, key in PLAIN_FIELDS:
        value = signals.get(key) if signals and key else None
        if how == "p95":
            shown = from_signals(name, signals)
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


def wrapped(text: str, indent: str = "   ") -> list[str]:
    """A long transcript line as plain lines of at most 100 columns, continued two columns further in."""
    return textwrap.wrap(
        text,
        width=100,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent]
