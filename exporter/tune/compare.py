"""The verdict diff of two measurements: capacity at SLO with its spread, knee, primary, headroom, causes.

Why verdicts and not curves: "did my change help" is answered by what the
diagnosis says moved — the primary at the knee, the layers that lost headroom,
causes that appeared or cleared — next to the capacity figure and its spread
over the repeats, so a gain inside the noise reads as one. ``tune`` accepts with
accept.py and shows this diff per trial; ``llm-layer-exporter compare`` prints it.
A side is a list of ramp records (report.json dicts), one per repeat.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from exporter.capacity.layout import GPUS_ASSUMED, GPUS_FROM_TEXT, Layout, Scaled, efficiency, gpus_text, parse_layout, scaled
from exporter.tune.accept import spread
from exporter.tune.capacity import SLO, Capacity, capacity_at_slo
from exporter.tune.decide import common_primary

#: a layer "lost headroom" when its mean headroom fell by more than this (0-1 scale)
HEADROOM_DROP = 0.05


class CompareError(ValueError):
    """A record that cannot be read or a stage it does not hold: one line."""


def load_side(spec: str) -> tuple[list[dict[str, Any]], SLO | None, str]:
    """``PATH`` (report.json or tune.json) or ``PATH#baseline`` / ``#trial-N`` / ``#best``: (runs, the record's SLO, label)."""
    runs, slo, label, _ = load_stage(spec)
    return runs, slo, label


def stage_fingerprint(doc: dict[str, Any], part: dict[str, Any]) -> Any:
    """A tune stage's fingerprint, its family filled in from the record's ``engine`` where its exporter
    named none: the flags of its command line then say its layout (exporter/capacity/layout.py)."""
    fp = part.get("fingerprint")
    if isinstance(fp, dict) and not fp.get("engine") and isinstance(doc.get("engine"), str):
        return {**fp, "engine": doc["engine"]}
    return fp


def _stage(doc: dict[str, Any], part: dict[str, Any], slo: SLO, label: str) -> tuple[list[dict[str, Any]], SLO | None, str, Any]:
    return list(part.get("runs") or []), slo, label, stage_fingerprint(doc, part)


def load_stage(spec: str) -> tuple[list[dict[str, Any]], SLO | None, str, Any]:
    """``load_side`` and the stage's fingerprint (a tune configuration's, with the settings its command
    line writes out; a ramp report's own): what its layout is read from (exporter/capacity/layout.py)."""
    path_text, _, stage = spec.partition("#")
    path = Path(path_text)
    if path.is_dir():
        path = path / ("tune.json" if (path / "tune.json").exists() else "report.json")
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise CompareError(f"{spec}: cannot read a JSON record ({err.__class__.__name__}: {err})") from None
    if not isinstance(doc, dict):
        raise CompareError(f"{spec}: expected a JSON object")
    if "steps" in doc:
        return [doc], None, path.name, doc.get("fingerprint")
    if "baseline" not in doc:
        raise CompareError(f"{spec}: neither a ramp report (steps) nor a tune record (baseline)")
    slo_doc = doc.get("slo") or {}
    slo = SLO(slo_doc.get("ttft_s"), slo_doc.get("itl_s"))
    stage = stage or "baseline"
    if stage == "baseline":
        return _stage(doc, doc["baseline"], slo, f"{path.name}#baseline")
    trials = doc.get("trials") or []
    if stage == "best":
        accepted = [t for t in trials if t.get("accepted")]
        if not accepted:
            return _stage(doc, doc["baseline"], slo, f"{path.name}#best (the baseline)")
        return _stage(doc, accepted[-1], slo, f"{path.name}#best (trial {accepted[-1].get('trial')})")
    if stage.startswith("trial-") and stage[6:].isdigit():
        n = int(stage[6:])
        for t in trials:
            if t.get("trial") == n:
                return _stage(doc, t, slo, f"{path.name}#{stage}")
    raise CompareError(f"{spec}: no stage {stage!r} (expected baseline, best or trial-N of 1..{len(trials)})")


def _knee(runs: Sequence[dict[str, Any]]) -> int | None:
    knees = [r["knee"]["concurrency"] for r in runs if r.get("knee")]
    return min(knees) if knees else None


def _causes(runs: Sequence[dict[str, Any]]) -> set[str]:
    return {
        f"{c['layer']}/{c['cause']}"
        for r in runs
        for s in r.get("steps") or []
        for c in (s.get("diagnosis") or {}).get("causes") or []
        if c.get("role") != "candidate"
    }


def _headroom(runs: Sequence[dict[str, Any]], concurrency: int) -> dict[str, float]:
    seen: dict[str, list[float]] = {}
    for r in runs:
        for s in r.get("steps") or []:
            if s.get("concurrency") != concurrency:
                continue
            for layer, lf in ((s.get("diagnosis") or {}).get("layers") or {}).items():
                if lf.get("headroom_mean") is not None:
                    seen.setdefault(layer, []).append(float(lf["headroom_mean"]))
    return {layer: sum(v) / len(v) for layer, v in seen.items()}


def _fingerprint(runs: Sequence[dict[str, Any]]) -> Any:
    """The fingerprint the last run that recorded one saw (None: none did)."""
    return next((r["fingerprint"] for r in reversed(runs) if isinstance(r.get("fingerprint"), dict)), None)


def _scaled(runs: Sequence[dict[str, Any]], side: dict[str, Any], slo: SLO, fingerprint: Any) -> Scaled:
    caps = [capacity_at_slo(r, slo) for r in runs]
    c = side["capacity"]
    mean = Capacity(c["concurrency"], c["requests_per_second"], c["tokens_per_second"])
    return scaled(caps, mean, fingerprint if fingerprint is not None else _fingerprint(runs))


def _side(runs: Sequence[dict[str, Any]], slo: SLO, fingerprint: Any = None) -> tuple[dict[str, Any], Scaled]:
    low, mean, high = spread(runs, slo)
    caps = [capacity_at_slo(r, slo) for r in runs]
    primary = common_primary(runs, slo)
    side = {
        "repeats": len(runs),
        "capacity": {
            "concurrency": min((c.concurrency for c in caps), default=0),
            "requests_per_second": mean,
            "tokens_per_second": sum(c.tokens_per_second for c in caps) / len(caps) if caps else 0.0,
        },
        "spread": {"min": low, "max": high},
        "knee": _knee(runs),
        "primary": primary.name if primary else None,
    }
    found = _scaled(runs, side, slo, fingerprint)
    side.update(found.fields())
    return side, found


def diff(
    a: Sequence[dict[str, Any]],
    b: Sequence[dict[str, Any]],
    slo: SLO,
    fingerprint_a: Any = None,
    fingerprint_b: Any = None,
) -> dict[str, Any]:
    """What moved from ``a`` to ``b``. Each side's layout is read from its ``fingerprint_*`` (a tune
    stage's, ``load_stage``), else from its runs'; ``scaling_efficiency`` is the larger layout's
    against the smaller's (``of``: the side it describes; ``against.name``: the other), null when the
    two have the same GPU count, serve different models, took their GPU counts from different places
    or the smaller carried nothing within the SLO (``comparable``, exporter/capacity/layout.py)."""
    (sa, scaled_a), (sb, scaled_b) = _side(a, slo, fingerprint_a), _side(b, slo, fingerprint_b)
    ra, rb = sa["capacity"]["requests_per_second"], sb["capacity"]["requests_per_second"]
    levels_a = {s["concurrency"] for r in a for s in r.get("steps") or []}
    levels_b = {s["concurrency"] for r in b for s in r.get("steps") or []}
    common = max(levels_a & levels_b, default=None)
    fell = []
    if common is not None:
        ha, hb = _headroom(a, common), _headroom(b, common)
        for layer in sorted(set(ha) & set(hb)):
            if ha[layer] - hb[layer] > HEADROOM_DROP:
                fell.append({"layer": layer, "from": ha[layer], "to": hb[layer], "concurrency": common})
    ca, cb = _causes(a), _causes(b)
    return {
        "slo": {"ttft_s": slo.ttft_s, "itl_s": slo.itl_s},
        "a": sa,
        "b": sb,
        "capacity_ratio": rb / ra if ra > 0 else None,
        "beyond_noise": sb["spread"]["min"] > sa["spread"]["max"] or sa["spread"]["min"] > sb["spread"]["max"],
        "knee_moved": {"from": sa["knee"], "to": sb["knee"]},
        "primary_moved": {"from": sa["primary"], "to": sb["primary"]},
        "headroom_fell": fell,
        "causes_appeared": sorted(cb - ca),
        "causes_cleared": sorted(ca - cb),
        "layout_changed": scaled_a.layout.shape != scaled_b.layout.shape,
        "scaling_efficiency": _efficiency(scaled_a, scaled_b),
    }


def _efficiency(a: Scaled, b: Scaled) -> dict[str, Any] | None:
    for one, other, of, against in ((b, a, "b", "a"), (a, b, "a", "b")):
        found = efficiency(one, other, against)
        if found is not None:
            return {"of": of, **found}
    return None


def _knee_text(k: int | None) -> str:
    return "none" if k is None else f"c={k}"


def render(d: dict[str, Any], label_a: str = "A", label_b: str = "B") -> list[str]:
    """The diff as terminal lines."""
    a, b = d["a"], d["b"]
    ratio = d["capacity_ratio"]
    noise = "beyond the noise" if d["beyond_noise"] else "within the noise"
    lines = [
        f"capacity at SLO: {label_a} {a['capacity']['requests_per_second']:.2f} req/s "
        f"(c={a['capacity']['concurrency']}, spread {a['spread']['min']:.2f}-{a['spread']['max']:.2f}) -> "
        f"{label_b} {b['capacity']['requests_per_second']:.2f} req/s (c={b['capacity']['concurrency']}, spread "
        f"{b['spread']['min']:.2f}-{b['spread']['max']:.2f})" + ("" if ratio is None else f", x{ratio:.2f}") + f", {noise}",
        f"knee: {_knee_text(d['knee_moved']['from'])} -> {_knee_text(d['knee_moved']['to'])}",
        f"primary at the knee: {d['primary_moved']['from'] or 'none'} -> {d['primary_moved']['to'] or 'none'}",
    ]
    for f in d["headroom_fell"]:
        lines.append(f"headroom fell: {f['layer']} {f['from']:.2f} -> {f['to']:.2f} at c={f['concurrency']}")
    if d["causes_appeared"]:
        lines.append("causes appeared: " + ", ".join(d["causes_appeared"]))
    if d["causes_cleared"]:
        lines.append("causes cleared: " + ", ".join(d["causes_cleared"]))
    if d.get("layout_changed"):
        lines += _layout_lines(d, label_a, label_b)
    return lines


def _per_gpu_text(side: dict[str, Any]) -> str:
    per_gpu, per_user = side.get("per_gpu") or {}, side.get("per_user_output_tokens_per_second")
    tokens, requests = per_gpu.get("output_tokens_per_second_at_slo"), per_gpu.get("requests_per_second_at_slo")
    if tokens is None or requests is None:
        return "-"
    user = "-" if per_user is None else f"{per_user:.1f}"
    return f"{tokens:.1f} tok/s, {requests:.3g} req/s per GPU, {user} tok/s per user"


def _why_not(d: dict[str, Any], la: Layout, lb: Layout) -> str:
    """Why two layouts with different GPU counts have no efficiency (``comparable``, exporter/capacity/layout.py)."""
    if GPUS_ASSUMED in (la.gpus_from, lb.gpus_from) or la.gpus_from != lb.gpus_from:
        return f"GPU counts from {GPUS_FROM_TEXT[la.gpus_from]} and {GPUS_FROM_TEXT[lb.gpus_from]} do not compare"
    smaller = d["a"] if la.gpus < lb.gpus else d["b"]
    if not (smaller.get("per_gpu") or {}).get("output_tokens_per_second_at_slo"):
        return "the smaller layout carried nothing within the SLO"
    return "different models"


def _layout_lines(d: dict[str, Any], label_a: str, label_b: str) -> list[str]:
    """The layouts, each side's per-GPU and per-user figures at the SLO, and the scaling efficiency."""
    la, lb = parse_layout(d["a"].get("layout")), parse_layout(d["b"].get("layout"))
    if la is None or lb is None:
        return []
    lines = [
        f"layout: {label_a} {la.with_gpus()} -> {label_b} {lb.with_gpus()}",
        f"at SLO: {label_a} {_per_gpu_text(d['a'])} -> {label_b} {_per_gpu_text(d['b'])}",
    ]
    eff = d.get("scaling_efficiency")
    if eff is not None:
        lines.append(f"scaling: {eff['text']}")
    elif la.gpus == lb.gpus:
        lines.append(f"scaling: both on {gpus_text(la.gpus)}, no efficiency to tell")
    else:
        lines.append(f"scaling: no efficiency ({_why_not(d, la, lb)})")
    return lines


__all__ = ["CompareError", "diff", "load_side", "load_stage", "render", "stage_fingerprint"]
