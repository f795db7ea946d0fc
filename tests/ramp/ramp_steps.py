"""Synthetic step tables for the ramp's unit tests (no server involved)."""

from __future__ import annotations

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


def table(rows: list[tuple[int, float, float | None]], layers: list[dict[str, tuple[str, float]]] | None = None) -> list[Step]:
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
