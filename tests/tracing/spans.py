"""OTLP trace exports in each engine's documented shape, as real protobuf messages (docs/tracing.md).

Every builder returns an ``ExportTraceServiceRequest``, what an engine's OTLP exporter sends
(one resource, one scope). Times are seconds (Unix for instants); the builders put them on
the span as the engine does. Two kinds of builder per engine:

- ``<engine>_request_span(trace_id, start_s, <the attribute values>...)``: the attributes as
  given, to test reading them (any value may be None: the attribute is left out, or a str:
  sent as text);
- ``<engine>_timeline(trace_id, <instants of the request's life>...)``: the attributes
  computed from the instants the way the engine's source computes them, to test what adds up.

Ids: ``trace_hex(n)`` is a valid 32-hex trace id for any n; span ids are derived from the
trace id and a role, so a builder's spans link up without being told.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

#: an attribute value as the builders take it (None: leave the attribute out)
Value = str | int | float | bool | None

SERVER = Span.SPAN_KIND_SERVER
INTERNAL = Span.SPAN_KIND_INTERNAL


def trace_hex(n: int) -> str:
    """A valid (non-zero) trace id, 32 lowercase hex digits, from any integer."""
    return hashlib.blake2b(str(n).encode(), digest_size=16).hexdigest()


def span_hex(trace_id: str, role: str) -> str:
    """A span id, 16 lowercase hex digits, for the span playing ``role`` in the trace."""
    return hashlib.blake2b(f"{trace_id}/{role}".encode(), digest_size=8).hexdigest()


def any_value(value: str | int | float | bool) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=value)


def key_values(attributes: Mapping[str, Value]) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in attributes.items() if v is not None]


def nanos(seconds: float) -> int:
    return round(seconds * 1e9)


def end_of(start_s: float, e2e: Value) -> float:
    """The span's end: start + e2e when e2e is a believable number, else the start (the engine
    ends the span when the request ends, whatever it wrote in the attribute)."""
    if isinstance(e2e, bool) or not isinstance(e2e, float | int) or not 0 <= e2e <= 86_400:
        return start_s
    return start_s + e2e


def make_span(
    trace_id: str,
    span_id: str,
    name: str,
    start_s: float,
    end_s: float,
    attributes: Mapping[str, Value] | None = None,
    *,
    parent_span_id: str = "",
    kind: int = INTERNAL,
) -> Span:
    return Span(
        trace_id=bytes.fromhex(trace_id),
        span_id=bytes.fromhex(span_id),
        parent_span_id=bytes.fromhex(parent_span_id),
        name=name,
        kind=kind,  # type: ignore[arg-type]
        start_time_unix_nano=nanos(start_s),
        end_time_unix_nano=nanos(end_s),
        attributes=key_values(attributes or {}),
    )


def export(
    spans: Sequence[Span], service: str | None = "unknown_service", resource: Mapping[str, Value] | None = None
) -> ExportTraceServiceRequest:
    """One resource (``service.name`` = ``service`` unless None, plus ``resource``) holding ``spans``."""
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    attributes: dict[str, Value] = {"service.name": service} if service is not None else {}
    attributes.update(resource or {})
    resource_spans.resource.attributes.extend(key_values(attributes))
    resource_spans.scope_spans.add().spans.extend(spans)
    return request


def merge(*requests: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    """One export holding the resources of all (a batch from several processes)."""
    out = ExportTraceServiceRequest()
    for request in requests:
        out.resource_spans.extend(request.resource_spans)
    return out


# -- vLLM ------------------------------------------------------------------------------------


def vllm_request_span(
    trace_id: str,
    start_s: float,
    queue: Value,
    prefill: Value,
    decode: Value,
    ttft: Value,
    e2e: Value,
    prompt: Value,
    completion: Value,
    request_id: Value,
    service: str | None = "unknown_service",
    *,
    inference: Value = None,
    model: Value = None,
    resource: Mapping[str, Value] | None = None,
) -> ExportTraceServiceRequest:
    """vLLM V1's one SERVER span ``llm_request`` of a finished request (start = arrival)."""
    end = end_of(start_s, e2e)
    attributes: dict[str, Value] = {
        "gen_ai.latency.time_to_first_token": ttft,
        "gen_ai.latency.e2e": e2e,
        "gen_ai.latency.time_in_queue": queue,
        "gen_ai.usage.prompt_tokens": prompt,
        "gen_ai.usage.completion_tokens": completion,
        "gen_ai.latency.time_in_model_prefill": prefill,
        "gen_ai.latency.time_in_model_decode": decode,
        "gen_ai.latency.time_in_model_inference": inference,
        "gen_ai.request.id": request_id,
        "gen_ai.response.model": model,
        "gen_ai.request.max_tokens": 128,
    }
    span = make_span(trace_id, span_hex(trace_id, "llm_request"), "llm_request", start_s, end, attributes, kind=SERVER)
    return export([span], service, {"vllm.instrumenting_module_name": "vllm.v1", "vllm.process_id": 4242, **(resource or {})})


def vllm_timeline(
    trace_id: str,
    arrival_s: float,
    queued_s: float,
    scheduled_s: float,
    first_token_s: float,
    last_token_s: float,
    finished_s: float,
    prompt: int = 100,
    completion: int = 50,
    request_id: str = "cmpl-1",
    service: str | None = "unknown_service",
) -> ExportTraceServiceRequest:
    """The span vLLM's ``OutputProcessor.do_tracing`` writes for a request with these instants:
    arrival (front end), queued and scheduled (engine core), first and last token, finished
    (the output processor's iteration that ended it)."""
    return vllm_request_span(
        trace_id,
        arrival_s,
        queue=scheduled_s - queued_s,
        prefill=first_token_s - scheduled_s,
        decode=last_token_s - first_token_s,
        ttft=first_token_s - arrival_s,
        e2e=finished_s - arrival_s,
        prompt=prompt,
        completion=completion,
        request_id=request_id,
        service=service,
        inference=last_token_s - scheduled_s,
    )


# -- SGLang ----------------------------------------------------------------------------------


def sglang_root_span(
    trace_id: str,
    start_s: float,
    prefill: Value,
    decode: Value,
    ttft: Value,
    e2e: Value,
    prompt: Value = 100,
    completion: Value = 50,
    request_id: Value = "a1b2c3d4e5",
    service: str | None = "sglang",
    *,
    inference: Value = None,
    queue: Value = None,
    model: Value = "Qwen/Qwen3-0.6B",
) -> ExportTraceServiceRequest:
    """SGLang's request root span ``Req <rid[:8]>``: ``prefill`` is what SGLang reports as
    ``time_in_model_prefill`` (dispatch -> first token, the queue wait included); no
    ``time_in_queue`` unless ``queue`` is given."""
    end = end_of(start_s, e2e)
    rid = str(request_id)
    attributes: dict[str, Value] = {
        "rid": rid,
        "module": "sglang::tokenizer_manager",
        "gen_ai.request.id": request_id,
        "gen_ai.usage.prompt_tokens": prompt,
        "gen_ai.usage.completion_tokens": completion,
        "gen_ai.response.model": model,
        "gen_ai.latency.time_to_first_token": ttft,
        "gen_ai.latency.e2e": e2e,
        "gen_ai.latency.time_in_model_decode": decode,
        "gen_ai.latency.time_in_model_inference": inference,
        "gen_ai.latency.time_in_model_prefill": prefill,
        "gen_ai.latency.time_in_queue": queue,
    }
    span = make_span(trace_id, span_hex(trace_id, "root"), f"Req {rid[:8]}", start_s, end, attributes)
    return export([span], service)


def sglang_slice_spans(
    trace_id: str,
    slices: Sequence[tuple[str, float, float]],
    ranks: int = 1,
    service: str | None = "sglang",
) -> ExportTraceServiceRequest:
    """The scheduler's side of one request: per tp rank a thread span under the root, and under
    it the stage slices ``(name, start_s, end_s)`` (each rank writes the same slices)."""
    root = span_hex(trace_id, "root")
    spans: list[Span] = []
    for rank in range(ranks):
        thread = span_hex(trace_id, f"thread{rank}")
        first, last = min(s for _, s, _ in slices), max(e for _, _, e in slices)
        spans.append(
            make_span(
                trace_id, thread, f"Scheduler tp{rank}", first, last, {"tp_rank": rank, "pid": 100 + rank}, parent_span_id=root
            )
        )
        for i, (name, start, end) in enumerate(slices):
            attributes: dict[str, Value] = {"decode_ct": 3} if name == "decode_loop" else {}
            spans.append(
                make_span(trace_id, span_hex(trace_id, f"slice{rank}.{i}"), name, start, end, attributes, parent_span_id=thread)
            )
    return export(spans, service)


def sglang_timeline(
    trace_id: str,
    created_s: float,
    dispatched_s: float,
    scheduled_s: float,
    first_token_s: float,
    finished_s: float,
    ranks: int = 1,
    service: str | None = "sglang",
    request_id: str = "a1b2c3d4e5",
) -> tuple[ExportTraceServiceRequest, ExportTraceServiceRequest]:
    """(the scheduler's slices, the tokenizer's root span) of a request with these instants, the
    root's latencies as SGLang's ``convert_to_gen_ai_span_attrs`` computes them: created
    (tokenizer), dispatched to the scheduler, scheduled (end of ``prefill_waiting``), first
    token, finished."""
    slices = [
        ("request_process", dispatched_s, dispatched_s + 0.0002),
        ("prefill_waiting", dispatched_s + 0.0002, scheduled_s),
        ("prefill_forward", scheduled_s, first_token_s),
        ("decode_loop", first_token_s, finished_s),
    ]
    root = sglang_root_span(
        trace_id,
        created_s,
        prefill=first_token_s - dispatched_s,
        decode=finished_s - first_token_s,
        ttft=first_token_s - created_s,
        e2e=finished_s - created_s,
        inference=finished_s - dispatched_s,
        request_id=request_id,
        service=service,
    )
    return sglang_slice_spans(trace_id, slices, ranks=ranks, service=service), root


# -- TGI -------------------------------------------------------------------------------------


def rust_duration(seconds: float) -> str:
    """Rust's ``format!("{:?}", Duration)``: ``"2.5s"``, ``"1.234567ms"``, ``"150µs"``, ``"12ns"``."""
    ns = round(seconds * 1e9)
    for scale, unit in ((1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "µs")):
        if ns >= scale:
            whole, frac = divmod(ns, scale)
            digits = f"{frac:0{len(str(scale)) - 1}d}".rstrip("0")
            return f"{whole}.{digits}{unit}" if digits else f"{whole}{unit}"
    return f"{ns}ns"


def tgi_request_span(
    trace_id: str,
    start_s: float,
    validation: float | None,
    queue: float | None,
    inference: float | None,
    generated_tokens: int = 20,
    *,
    name: str = "generate_stream",
    service: str | None = "text-generation-inference",
    as_text: bool = True,
    children: bool = True,
    prompt_tokens: int | None = None,
) -> ExportTraceServiceRequest:
    """TGI's router span ``name`` (fields as Rust ``{:?}`` text, or numbers of seconds with
    ``as_text=False``; a None field is not recorded, as when the request failed), with the
    inner ``Infer`` span and its ``queued`` and ``infer`` children when ``children``."""
    total = sum(x for x in (validation, queue, inference) if x is not None)

    def field(seconds: float | None) -> Value:
        if seconds is None:
            return None
        return rust_duration(seconds) if as_text else seconds

    per_token = None if inference is None else inference / max(generated_tokens, 1)
    router = span_hex(trace_id, "router")
    attributes: dict[str, Value] = {
        "parameters": "GenerateParameters { max_new_tokens: Some(20), .. }",
        "total_time": field(total if inference is not None else None),
        "validation_time": field(validation),
        "queue_time": field(queue),
        "inference_time": field(inference),
        "time_per_token": field(per_token),
        "seed": "None",
        "prompt_tokens": None if prompt_tokens is None else str(prompt_tokens),
        "generated_tokens": None if prompt_tokens is None else str(generated_tokens),
    }
    spans = [make_span(trace_id, router, name, start_s, start_s + total, attributes, kind=SERVER)]
    if children:
        inner = span_hex(trace_id, "infer_generate_stream")
        queued_at = start_s + (validation or 0.0)
        batched_at = queued_at + (queue or 0.0)
        spans = [
            make_span(trace_id, span_hex(trace_id, "queued"), "queued", queued_at, batched_at, parent_span_id=inner),
            make_span(trace_id, span_hex(trace_id, "infer"), "infer", batched_at, start_s + total, parent_span_id=inner),
            make_span(trace_id, inner, "generate_stream", queued_at, start_s + total, parent_span_id=router),
            *spans,
        ]
    return export(spans, service)


# -- TensorRT-LLM ----------------------------------------------------------------------------


def trtllm_request_span(
    trace_id: str,
    start_s: float,
    queue: Value,
    ttft: Value,
    e2e: Value,
    prompt: Value = 100,
    completion: Value = 50,
    request_id: Value = "7",
    kv_transfer: Value = None,
    service: str | None = "trtllm-serve",
) -> ExportTraceServiceRequest:
    """trtllm-serve's request span: queue = first scheduled - arrival, ttft = first token -
    arrival, e2e = last token - arrival, the KV-cache transfer when disaggregated."""
    end = end_of(start_s, e2e)
    attributes: dict[str, Value] = {
        "gen_ai.request.id": request_id,
        "gen_ai.request.max_tokens": 64,
        "gen_ai.usage.prompt_tokens": prompt,
        "gen_ai.usage.completion_tokens": completion,
        "gen_ai.latency.time_to_first_token": ttft,
        "gen_ai.latency.e2e": e2e,
        "gen_ai.latency.time_in_queue": queue,
        "gen_ai.latency.kv_cache_transfer_time": kv_transfer,
        "gen_ai.response.finish_reasons": '["stop"]',
    }
    span = make_span(trace_id, span_hex(trace_id, "llm_request"), "llm_request", start_s, end, attributes, kind=SERVER)
    return export([span], service)


def trtllm_timeline(
    trace_id: str,
    arrival_s: float,
    first_scheduled_s: float,
    first_token_s: float,
    last_token_s: float,
    kv_transfer: float | None = None,
    service: str | None = "trtllm-serve",
) -> ExportTraceServiceRequest:
    return trtllm_request_span(
        trace_id,
        arrival_s,
        queue=first_scheduled_s - arrival_s,
        ttft=first_token_s - arrival_s,
        e2e=last_token_s - arrival_s,
        kv_transfer=kv_transfer,
        service=service,
    )
