"""Synthetic step tables for the ramp's unit tests (no server involved)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from exporter.ramp.model import CauseFigures, ClientFigures, DiagnosisFigures, LayerFigures, Percentiles, Step


def client(tok_s: float, ttft_p95: float | None = 0.1, errors: int = 0, requests: int = 100) -> ClientFigures:
    return ClientFigures(
        duration_s=10.0,
        requests=requests,
        errors=errors,
        timeouts=0,
        output_tokens=int(tok_s * 10),
        requests_per_s=requests / 10.0,
        output_tokens_per_s=tok_s,
        ttft_s=Percentiles(None if ttft_p95 is None else ttft_p95 / 2, ttft_p95, None if ttft_p95 is None else ttft_p95 * 1.2),
        itl_s=Percentiles(0.01, 0.02, 0.03),
    )


def table(
    rows: Sequence[tuple[int, float, float | None]], layers: Sequence[Mapping[str, tuple[str, float]]] | None = None
) -> list[Step]:
    """rows: (concurrency, output tok/s, TTFT p95 s); layers: per step {layer: (status, score)}."""
    steps = []
    for i, (conc, tok_s, ttft) in enumerate(rows):
        diag = DiagnosisFigures(samples=3)
        for layer, (status, score) in (layers[i] if layers else {}).items():
            diag.layers[layer] = LayerFigures(score, score, status, 3, worst_status=status)
            if status != "ok":
                diag.causes.append(CauseFigures(layer, f"{layer}_cause", score, 1.0, {f"{layer}_metric": score}, f"fix {layer}"))
        steps.append(Step(index=i, concurrency=conc, client=client(tok_s, ttft), diagnosis=diag))
    return steps


# ------------------------------------------------------------------ /diagnosis documents (schema 2)

#: (status, score, headroom) per layer
LayerSpec = dict[str, tuple[str, float | None, float | None]]

KV_ADVICE = "Lower max_num_seqs, give the KV cache more memory, or add replicas."


def kv_primary(kv: float = 0.93, preempt: float = 7.5, waiting: int = 6, confidence: float = 0.93) -> dict[str, Any]:
    """memory/kv_cache_pressure named primary, the way the engine writes it (see exporter/diagnosis/verdict.py)."""
    summary = f"KV cache {kv:.0%} full, {preempt:.2g} preemptions/s".replace("%", " %")
    return {
        "layer": "memory",
        "cause": "kv_cache_pressure",
        "score": 1.0,
        "confidence": confidence,
        "role": "primary",
        "summary": summary,
        "explains": ["queueing"],
        "evidence": {"max_over_window(max(llm_kv_cache_usage_ratio))": kv, "rate(llm_kv_cache_preemptions_total)": preempt},
        "advice": KV_ADVICE,
        "chain": f"{waiting} requests waiting, queue p95 780 ms ← {summary}",
    }


def primary(layer: str, cause: str, confidence: float = 0.7, chain: str = "") -> dict[str, Any]:
    return {
        "layer": layer,
        "cause": cause,
        "score": 1.0,
        "confidence": confidence,
        "role": "primary",
        "summary": f"{cause} holds",
        "explains": ["queueing"],
        "evidence": {f"{layer}_metric": 1.0},
        "advice": f"fix {layer}",
        "chain": chain or f"queueing ← {cause} holds",
    }


def diagnosis_doc(
    state: str | None,
    layers: Mapping[str, tuple[str, float | None, float | None]],
    main: dict[str, Any] | None = None,
    others: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One GET /diagnosis body; ``state=None`` leaves the key out (an older exporter)."""
    doc: dict[str, Any] = {
        "schema_version": 2,
        "timestamp": 1.0,
        "notices": [],
        "symptoms": [{"id": "queueing", "text": "6 requests waiting", "evidence": {}}] if state == "degraded" else [],
        "primary": main,
        "contributing": [],
        "layers": {
            name: {
                "score": score,
                "status": status,
                "headroom": room,
                "limit": "" if room is None else f"{name} limit; {room:.0%} headroom",
            }
            for name, (status, score, room) in layers.items()
        },
        "bottlenecks": ([main] if main else []) + list(others or []),
        "holding": [],
    }
    if state is not None:
        doc["state"] = state
    return doc


def healthy_layers(memory_room: float = 0.6, hardware_room: float = 0.3) -> LayerSpec:
    """Batch-1-like decode: DRAM busy (hardware near its limit) yet ok, nothing suffers."""
    return {
        "hardware": ("ok", 0.35, hardware_room),
        "memory": ("ok", 0.2, memory_room),
        "scheduler": ("ok", 0.1, 0.8),
        "speculative_decoding": ("unknown", None, None),
    }


def kv_pressure_layers() -> LayerSpec:
    return {
        "hardware": ("ok", 0.38, 0.23),
        "memory": ("bottleneck", 1.0, 0.0),
        "scheduler": ("warning", 0.5, 0.6),
        "speculative_decoding": ("unknown", None, None),
    }


def steps_from_docs(rows: Sequence[tuple[int, float, float | None]], docs: list[list[dict[str, Any]]]) -> list[Step]:
    """rows: (concurrency, output tok/s, TTFT p95 s); docs: the settled /diagnosis readings of each step."""
    from exporter.ramp.aggregate import diagnosis_figures

    return [
        Step(index=i, concurrency=conc, client=client(tok_s, ttft), diagnosis=diagnosis_figures(docs[i]))
        for i, (conc, tok_s, ttft) in enumerate(rows)
    ]


#: the shape of the simulator's kv_pressure ramp (30 blocks, 64 + 128 tokens): scales to 4, flat at 8
KV_ROWS: list[tuple[int, float, float | None]] = [(1, 210, 0.03), (2, 425, 0.013), (4, 645, 0.019), (8, 622, 0.886)]


def kv_pressure_docs() -> list[list[dict[str, Any]]]:
    """Healthy to 4 (preemptions start there: a memory ``warning``), degraded at 8 with memory primary."""
    kv_warning = {k: v for k, v in kv_primary(0.97, 2.0).items() if k != "chain"} | {"role": "warning", "score": 0.7}
    warned = {**healthy_layers(), "memory": ("warning", 0.7, 0.03)}
    queue = {
        "layer": "scheduler",
        "cause": "queue_backlog",
        "score": 0.5,
        "confidence": 0.7,
        "role": "symptom",
        "summary": "",
        "explains": ["queueing"],
        "evidence": {},
        "advice": "add replicas",
    }
    knee = [diagnosis_doc("healthy", warned, None, [kv_warning]) for _ in range(2)]
    knee += [diagnosis_doc("degraded", kv_pressure_layers(), kv_primary(0.93, 7.5, confidence=0.9), [queue]) for _ in range(3)]
    knee += [diagnosis_doc("degraded", kv_pressure_layers(), kv_primary(0.97, 6.0, waiting=4, confidence=0.96), [queue])]
    knee += [diagnosis_doc("degraded", kv_pressure_layers(), primary("scheduler", "queue_backlog", 0.5), [])]
    knee += [diagnosis_doc("degraded", kv_pressure_layers(), kv_primary(0.97, 6.0, waiting=4, confidence=0.93), [queue])]
    return [
        [diagnosis_doc("healthy", healthy_layers()) for _ in range(6)],
        [diagnosis_doc("healthy", healthy_layers(0.45)) for _ in range(6)],
        [diagnosis_doc("healthy", warned, None, [kv_warning]) for _ in range(6)],
        knee,
    ]
