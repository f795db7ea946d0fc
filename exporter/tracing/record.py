"""One finished request, as every engine's spans say it: the record the tracing layer is built on.

Why one shape: vLLM, SGLang, TGI and TensorRT-LLM each describe a request's life in their
own span names and attributes (exporter/tracing/normalize.py reads them); the join with
what the layers were doing (exporter/tracing/join.py), ``GET /requests``, the
``requests`` command and the report read only this. Times are seconds; a phase an engine
does not report is None, never 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: the phases a request's end-to-end time splits into, in order
PHASES: tuple[str, ...] = ("queue", "prefill", "decode")


@dataclass(frozen=True)
class RequestRecord:
    """A finished request: who served it, when it arrived, where its time went."""

    #: the engine's name in the exporter's configuration (``engines[].name``)
    engine: str
    #: the served model, when the span names it ("" otherwise)
    model: str
    #: W3C trace id, 32 lowercase hex digits
    trace_id: str
    #: the request span's id, 16 lowercase hex digits
    span_id: str
    #: the engine's request id (``gen_ai.request.id``), "" when not sent
    request_id: str
    #: arrival, Unix seconds (the request span's start)
    arrival: float
    queue_seconds: float | None
    prefill_seconds: float | None
    decode_seconds: float | None
    ttft_seconds: float | None
    e2e_seconds: float | None
    prompt_tokens: int | None
    completion_tokens: int | None

    @property
    def finish(self) -> float:
        """Unix seconds the request ended (arrival + end-to-end; arrival when that is unknown)."""
        return self.arrival + (self.e2e_seconds or 0.0)

    def phases(self) -> dict[str, float | None]:
        """queue / prefill / decode seconds, by name."""
        return {"queue": self.queue_seconds, "prefill": self.prefill_seconds, "decode": self.decode_seconds}

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
