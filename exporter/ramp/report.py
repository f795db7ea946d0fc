"""report.json and report.md: what the ramp measured and what it concluded.

Why the JSON is written first and after every step: a ramp that dies half-way
(server gone, a step with only errors) must still leave the steps it finished
on disk; the Markdown and the PNG are derived views written after it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from exporter import jsonsafe
from exporter.capacity.atslo import DIAGNOSIS_SLO, SLO, capacity_at_slo
from exporter.capacity.layout import GPUS_ASSUMED, GPUS_FROM_TEXT, parse_layout, scaled
from exporter.ramp.knee import SOURCE_PRIMARY, Saturation, baseline_saturated, fallback_note
from exporter.ramp.model import PrimaryFigures, Step
from exporter.ramp.traced import sentence as traced_sentence
from exporter.schema import LAYERS

REPORT_VERSION = 1


def build_report(
    steps: Sequence[Step],
    knee: Step | None,
    saturation: Saturation | None,
    config: dict[str, Any],
    error: str | None = None,
    complete: bool = True,
    fingerprint: dict[str, Any] | None = None,
    slo: SLO | None = None,
) -> dict[str, Any]:
    """The report.json document (keys ``steps``, ``knee``, ``first_saturated_layer``, ``cause`` and context).

    Per step, ``steps[].diagnosis`` carries ``state``, ``states``, ``primary`` (with its
    ``chain``) and ``primaries``; ``baseline_state``, ``knee_state``, ``knee_primary``
    and ``chain`` repeat what matters at the baseline and at the knee.

    For a capacity profile (exporter/capacity): ``fingerprint``, the engine configuration the
    exporter published when the ramp began (``ExporterProbe.fingerprint``; null when unknown), and
    ``workload``, the mean prompt / output tokens per request the run made (``workload_means``).

    Per configuration (exporter/capacity/layout.py): ``capacity_at_slo`` (the highest step meeting
    ``slo``, default the diagnosis's 2 s / 200 ms, with that SLO), ``layout`` (TP x PP x DP and the
    GPUs, from the fingerprint), ``per_gpu`` and ``per_user_output_tokens_per_second``.
    """
    doc = {
        "version": REPORT_VERSION,
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "complete": complete and error is None,
        "error": error,
        "config": config,
        "steps": [s.to_dict() for s in steps],
        "knee": knee.to_dict() if knee is not None else None,
        "first_saturated_layer": saturation.layer if saturation else None,
        "cause": saturation.cause if saturation else None,
        "saturation": asdict(saturation) if saturation else None,
        "baseline_saturated": baseline_saturated(steps),
        "baseline_state": steps[0].diagnosis.state if steps else None,
        "knee_state": knee.diagnosis.state if knee is not None else None,
        "knee_primary": asdict(knee.diagnosis.primary) if knee is not None and knee.diagnosis.primary else None,
        "chain": (saturation.chain or None) if saturation else None,
        "note": saturation.note if saturation and saturation.note else (fallback_note(steps, knee, saturation) or None),
        "states": [
            {
                "concurrency": s.concurrency,
                "state": s.diagnosis.state,
                "states": s.diagnosis.states,
                "primary": _primary_name(s.diagnosis.primary),
                "chain": s.diagnosis.primary.chain if s.diagnosis.primary else None,
            }
            for s in steps
        ],
        "fingerprint": fingerprint,
        "workload": workload_means(steps, config),
        "totals": {
            "requests": sum(s.client.requests for s in steps),
            "errors": sum(s.client.errors for s in steps),
            "timeouts": sum(s.client.timeouts for s in steps),
            "output_tokens": sum(s.client.output_tokens for s in steps),
        },
    }
    doc.update(scaling_fields(doc, fingerprint, slo or DIAGNOSIS_SLO))
    return doc


def scaling_fields(doc: dict[str, Any], fingerprint: dict[str, Any] | None, slo: SLO) -> dict[str, Any]:
    """``capacity_at_slo``, ``layout``, ``per_gpu`` and ``per_user_output_tokens_per_second`` of one ramp record."""
    cap = capacity_at_slo(doc, slo)
    return {
        "capacity_at_slo": {**cap.as_dict(), "slo": {"ttft_s": slo.ttft_s, "itl_s": slo.itl_s}},
        **scaled([cap], cap, fingerprint).fields(),
    }


def workload_means(steps: Sequence[Step], config: dict[str, Any]) -> dict[str, Any] | None:
    """Mean prompt / output tokens per request: the engine's own counts where it publishes them (its token
    counters over its finished requests, all steps together), else what the client asked for and received
    (``config["prompt_tokens"]``, output tokens over completed requests); None when nothing finished."""
    finished = sum(s.exporter.counters.get("requests_finished", 0.0) for s in steps)
    prompt = sum(s.exporter.counters.get("prompt_tokens", 0.0) for s in steps)
    output = sum(s.exporter.counters.get("generation_tokens", 0.0) for s in steps)
    if finished > 0 and prompt > 0 and output > 0:
        return {"prompt_tokens_mean": prompt / finished, "output_tokens_mean": output / finished, "source": "engine"}
    requests = sum(s.client.requests for s in steps)
    if requests <= 0:
        return None
    asked = config.get("prompt_tokens")
    return {
        "prompt_tokens_mean": float(asked) if isinstance(asked, (int, float)) and asked > 0 else None,
        "output_tokens_mean": sum(s.client.output_tokens for s in steps) / requests,
        "source": "client",
    }


def _scaling_line(report: dict[str, Any]) -> str:
    """The layout and what it carried per GPU and per user at the SLO, in one sentence."""
    lay, cap, per_gpu = parse_layout(report["layout"]), report["capacity_at_slo"], report["per_gpu"]
    if lay is None:
        return "Layout: unknown."
    slo = SLO(cap["slo"]["ttft_s"], cap["slo"]["itl_s"])
    if lay.gpus_from == GPUS_ASSUMED:
        text = "Layout: not published (no TP, PP, DP or GPU read), counted as 1 GPU"
    else:
        text = f"Layout: {lay.with_gpus()}, GPU count from {GPUS_FROM_TEXT[lay.gpus_from]}"
        if lay.assumed:
            text += f"; {', '.join(d.upper() for d in lay.assumed)} not published (1 each)"
    if not cap["concurrency"]:
        return text + f". No step met the SLO ({slo.describe()}): nothing carried per GPU."
    return (
        text + f". At the SLO ({slo.describe()}, concurrency {cap['concurrency']}): "
        f"{per_gpu['output_tokens_per_second_at_slo']:.1f} output tok/s and {per_gpu['requests_per_second_at_slo']:.3g} req/s "
        f"per GPU, {_num(report.get('per_user_output_tokens_per_second'), '{:.1f}')} output tok/s per user."
    )


def _primary_name(p: PrimaryFigures | None) -> str | None:
    return None if p is None else f"{p.layer}/{p.cause}"


def write_json(directory: Path, report: dict[str, Any]) -> Path:
    """Write report.json atomically (a reader never sees half a file)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "report.json"
    tmp = directory / ".report.json.tmp"
    tmp.write_text(jsonsafe.dumps(report, indent=2, default=str) + "\n")  # NaN/Inf as null: strict JSON
    os.replace(tmp, path)
    return path


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f}"


def _num(v: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def _gauge(step: Step, name: str, which: str = "max", fmt: str = "{:.2f}") -> str:
    stat = step.exporter.gauges.get(name)
    return "-" if stat is None else fmt.format(getattr(stat, which))


def _flags(step: Step) -> str:
    """Confirmed flags, then transient ones in parentheses."""
    parts = list(step.flags) + [f"({f}, transient)" for f in step.transient_flags]
    return ", ".join(parts) or "-"


def _layer_cell(step: Step, layer: str) -> str:
    lf = step.diagnosis.layers.get(layer)
    if lf is None:
        return "-"
    score = "" if lf.score_mean is None else f" {lf.score_mean:.2f}"
    mark = {"bottleneck": "**B**", "warning": "W", "ok": "ok"}.get(lf.status, "?")
    return mark + score


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _state_cell(step: Step) -> str:
    """ "degraded (75 %)": the step's state and the share of its readings in it."""
    d = step.diagnosis
    if not d.samples:
        return "-"
    share = d.states.get(d.state)
    return d.state if share is None else f"{d.state} ({share:.0%})"


def _headroom_cell(step: Step, layer: str) -> str:
    lf = step.diagnosis.layers.get(layer)
    if lf is None or lf.headroom_mean is None:
        return "-"
    return f"{lf.headroom_mean:.0%}"


def _verdict(saturation: Saturation, knee: Step | None) -> list[str]:
    """The layer that gave out first: the primary at the knee and its chain, or the fallback."""
    at_knee = knee is not None and saturation.step_index == knee.index
    where = "at the knee" if at_knee else f"at concurrency {saturation.concurrency}"
    if saturation.source == SOURCE_PRIMARY:
        out = [
            f"**Gave out first: `{saturation.layer}`**, primary cause `{saturation.cause}` {where} "
            f"(named in {saturation.readings} of {saturation.degraded_readings} degraded readings, "
            f"mean confidence {_num(saturation.confidence)}; layer {saturation.status}, score {_num(saturation.score)})."
        ]
        if saturation.chain:
            out += ["", f"Chain: {saturation.chain}"]
        if not saturation.crossed:
            out += ["", "The same primary already degraded the service at the baseline."]
    else:
        out = [
            f"**First saturated layer: `{saturation.layer}`** ({saturation.status}, score "
            f"{_num(saturation.score)}) {where}; cause `{saturation.cause or 'unnamed'}`."
        ]
        if not saturation.crossed:
            out.append("No layer crossed from `ok` during the ramp; this layer was already saturated at the baseline.")
    if saturation.note:
        out += ["", f"Note: {saturation.note}."]
    if saturation.evidence:
        out += ["", "Evidence:", ""] + [f"- `{k}` = {v}" for k, v in saturation.evidence.items()]
    if saturation.advice:
        out += ["", f"Advice: {saturation.advice}"]
    return out


def render_markdown(report: dict[str, Any], steps: Sequence[Step], knee: Step | None, saturation: Saturation | None) -> str:
    """A readable summary: verdict first, then the step table, the layer map and the evidence."""
    cfg = report["config"]
    out = ["# Ramp report", ""]
    out.append(
        f"Target `{cfg.get('target')}` (model `{cfg.get('model') or '?'}`), exporter `{cfg.get('exporter')}`; "
        f"{cfg.get('step_seconds')} s per step, {cfg.get('prompt_tokens')} prompt / {cfg.get('output_tokens')} output tokens, "
        f"shared prefix ratio {cfg.get('shared_prefix_ratio')}."
    )
    out.append("")
    if report.get("error"):
        out += [f"**Stopped early:** {report['error']}", ""]
    if knee is None:
        tested = ", ".join(str(s.concurrency) for s in steps) or "none"
        out.append(f"**No knee** within the tested concurrencies ({tested}): throughput kept scaling and TTFT p95 did not jump.")
    else:
        out.append(f"**Knee at concurrency {knee.concurrency}** (step {knee.index + 1}): {', '.join(knee.flags)}.")
        said = traced_sentence(knee.traced) if knee.traced is not None else None
        if said:  # the engine's own spans: where the time went at the knee (docs/tracing.md)
            out += ["", f"Where the time went at the knee, from the engine's spans: {said}."]
    out.append("")
    if steps:
        out += [f"Baseline (concurrency {steps[0].concurrency}): **{_state_cell(steps[0])}**.", ""]
    if report.get("layout") and report.get("capacity_at_slo"):
        out += [_scaling_line(report), ""]
    if saturation is not None:
        out += _verdict(saturation, knee)
    elif knee is not None:
        out.append(f"No layer named: {fallback_note(steps, knee, saturation)}.")
    if report.get("baseline_saturated"):
        names = ", ".join(f"`{n}`" for n in report["baseline_saturated"])
        out += ["", f"Already in warning/bottleneck at the baseline (concurrency {steps[0].concurrency}): {names}."]
    out += ["", "![throughput, TTFT p95 and layer scores against concurrency](report.png)", ""]
    out += ["## Steps", ""]
    out.append(
        "| conc | req/s | out tok/s | scaling | TTFT p50/p95/p99 ms | ITL p50/p95/p99 ms | ok / err / timeout "
        "| KV max | waiting mean | preempt | busiest thread max | SM active mean | flags |"
    )
    out.append("|" + "---|" * 13)
    for s in steps:
        c = s.client
        out.append(
            f"| {s.concurrency} | {c.requests_per_s:.2f} | {c.output_tokens_per_s:.1f} | {_num(s.scaling)} "
            f"| {_ms(c.ttft_s.p50)}/{_ms(c.ttft_s.p95)}/{_ms(c.ttft_s.p99)} "
            f"| {_ms(c.itl_s.p50)}/{_ms(c.itl_s.p95)}/{_ms(c.itl_s.p99)} "
            f"| {c.requests} / {c.errors} / {c.timeouts} | {_gauge(s, 'kv_cache_usage_ratio')} "
            f"| {_gauge(s, 'requests_waiting', 'mean', '{:.1f}')} | {_num(s.exporter.counters.get('preemptions'), '{:.0f}')} "
            f"| {_gauge(s, 'busiest_thread_cpu_ratio')} | {_gauge(s, 'sm_active_ratio', 'mean')} | {_flags(s)} |"
        )
    out += [
        "",
        "## Diagnosis per step",
        "",
        "State: upper median of the readings (share of readings in it); primary: the cause named most often "
        "in the degraded readings, with its chain.",
        "",
    ]
    out += ["| conc | state | primary | readings | confidence | chain |", "|---|---|---|---|---|---|"]
    for s in steps:
        p = s.diagnosis.primary
        if p is None:
            out.append(f"| {s.concurrency} | {_state_cell(s)} | - | - | - | - |")
        else:
            out.append(
                f"| {s.concurrency} | {_state_cell(s)} | {p.layer} `{p.cause}` | {p.readings} of {s.diagnosis.degraded_readings} "
                f"| {p.confidence_mean:.2f} | {_cell(p.chain) or '-'} |"
            )
    out += [
        "",
        "## Layers per step",
        "",
        "Status over the step (upper median of the samples) and mean score; **B** bottleneck, W warning, ? unknown.",
        "",
    ]
    out.append("| conc | " + " | ".join(LAYERS) + " |")
    out.append("|" + "---|" * (len(LAYERS) + 1))
    for s in steps:
        out.append(f"| {s.concurrency} | " + " | ".join(_layer_cell(s, layer) for layer in LAYERS) + " |")
    if any(lf.headroom_mean is not None for s in steps for lf in s.diagnosis.layers.values()):
        out += [
            "",
            "## Headroom per step",
            "",
            "How far each layer stayed from its nearest limit (mean over the step; 0 % = at it).",
            "",
        ]
        out.append("| conc | " + " | ".join(LAYERS) + " |")
        out.append("|" + "---|" * (len(LAYERS) + 1))
        for s in steps:
            out.append(f"| {s.concurrency} | " + " | ".join(_headroom_cell(s, layer) for layer in LAYERS) + " |")
    causes = [(s, cf) for s in steps for cf in s.diagnosis.causes]
    if causes:
        out += [
            "",
            "## Causes reported",
            "",
            "| conc | layer | cause | role | max score | share of step |",
            "|---|---|---|---|---|---|",
        ]
        for s, cf in causes:
            out.append(
                f"| {s.concurrency} | {cf.layer} | `{cf.cause}` | {cf.role or '-'} | {cf.score_max:.2f} | {cf.share:.0%} |"
            )
    errors = [(s, m) for s in steps for m in s.client.error_messages]
    if errors:
        out += ["", "## Client errors (first of each step)", ""] + [f"- concurrency {s.concurrency}: {m}" for s, m in errors]
    t = report["totals"]
    out += [
        "",
        f"Totals: {t['requests']} requests completed, {t['errors']} errors ({t['timeouts']} timeouts), {t['output_tokens']} output tokens.",
        "",
    ]
    return "\n".join(out)


def write_all(
    directory: Path, report: dict[str, Any], steps: Sequence[Step], knee: Step | None, saturation: Saturation | None
) -> list[Path]:
    """report.json, then report.md, then report.png; a plotting failure leaves the first two."""
    written = [write_json(directory, report)]
    md = directory / "report.md"
    md.write_text(render_markdown(report, steps, knee, saturation))
    written.append(md)
    from exporter.ramp.plot import write_png  # matplotlib: only when a report is written

    written.append(write_png(directory / "report.png", steps, knee, saturation))
    return written
