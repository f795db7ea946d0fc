"""exporter/tracing/normalize.py: each engine's spans -> RequestRecord, routing, hostile input."""

from __future__ import annotations

import math
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue

from exporter.tracing.normalize import (
    IGNORED_REASONS,
    MAX_SECONDS,
    MAX_TEXT,
    MAX_TOKENS,
    PHASE_SUM_TOLERANCE,
    SpanNormalizer,
    TraceRouting,
    parse_duration,
    parse_trace_service,
    phase_sum_error,
)
from exporter.tracing.record import RequestRecord
from tests.tracing.spans import (
    export,
    make_span,
    merge,
    rust_duration,
    sglang_root_span,
    sglang_slice_spans,
    sglang_timeline,
    span_hex,
    tgi_request_span,
    trace_hex,
    trtllm_request_span,
    trtllm_timeline,
    vllm_request_span,
    vllm_timeline,
)

T0 = 1_700_000_000.0
PROFILE = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
#: whole exports are slower to draw: fewer, so the unit tier's 2 s budget holds on a busy machine
EXPORTS = settings(PROFILE, max_examples=60)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def normalizer(etype: str = "auto", service: str | None = None, **kw: float) -> tuple[SpanNormalizer, Clock]:
    clock = Clock()
    routing = TraceRouting.from_engines([("eng", etype, service)])
    return SpanNormalizer(routing, clock=clock, **kw), clock  # type: ignore[arg-type]


def only(records: list[RequestRecord]) -> RequestRecord:
    assert len(records) == 1, records
    return records[0]


def close(a: float | None, b: float, tol: float = 1e-6) -> bool:
    return a is not None and abs(a - b) <= tol


def nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in counts.items() if v}


# -- vLLM ------------------------------------------------------------------------------------


@pytest.mark.parametrize("etype", ["vllm", "auto", "llamacpp"])
def test_vllm_span_becomes_one_record(etype: str) -> None:
    norm, _ = normalizer(etype)
    tid = trace_hex(1)
    req = vllm_request_span(tid, T0, 0.25, 0.5, 2.0, 0.8, 2.8, 120, 64, "cmpl-abc", model="Qwen/Qwen3-0.6B")
    r = only(norm.records(req))
    assert (r.engine, r.model, r.trace_id, r.request_id) == ("eng", "Qwen/Qwen3-0.6B", tid, "cmpl-abc")
    assert r.span_id == span_hex(tid, "llm_request")
    assert r.arrival == T0
    # the phases partition e2e: prefill = ttft - queue, decode = e2e - ttft (docs/tracing.md)
    got = (r.queue_seconds, r.prefill_seconds, r.decode_seconds, r.ttft_seconds, r.e2e_seconds)
    assert got == pytest.approx((0.25, 0.55, 2.0, 0.8, 2.8), abs=1e-9)
    assert (r.prompt_tokens, r.completion_tokens) == (120, 64)
    assert nonzero(norm.dropped()) == {}


def test_vllm_model_from_the_request_when_the_response_names_none() -> None:
    norm, _ = normalizer()
    req = vllm_request_span(trace_hex(2), T0, 0.1, 0.1, 0.1, 0.2, 0.4, 1, 1, "x")
    req.resource_spans[0].scope_spans[0].spans[0].attributes.add(key="gen_ai.request.model", value=AnyValue(string_value="m-req"))
    assert only(norm.records(req)).model == "m-req"
    assert only(norm.records(vllm_request_span(trace_hex(3), T0, 0.1, 0.1, 0.1, 0.2, 0.4, 1, 1, "x"))).model == ""


def test_vllm_phases_sum_to_e2e() -> None:
    """The model's phases cover queued -> last token; the front end's few ms go to prefill (before
    the first token) and decode (after it), so the record's phases add up to e2e."""
    norm, _ = normalizer("vllm")
    # tokenise + hop to the engine core 6 ms, 0.4 s queued, 0.3 s prefill, 1.5 s decode, 3 ms out
    req = vllm_timeline(trace_hex(4), T0, T0 + 0.006, T0 + 0.406, T0 + 0.706, T0 + 2.206, T0 + 2.209)
    r = only(norm.records(req))
    err = phase_sum_error(r)
    assert err is not None and abs(err) < 1e-6 < PHASE_SUM_TOLERANCE, err
    assert close(r.ttft_seconds, 0.706, 1e-3) and close(r.prefill_seconds, 0.306, 1e-3)


# -- SGLang ----------------------------------------------------------------------------------


def sglang_case(ranks: int = 1) -> tuple[ExportTraceServiceRequest, ExportTraceServiceRequest]:
    # created, dispatched 4 ms later, waits 0.6 s, prefill 0.3 s, decode 1.1 s
    return sglang_timeline(trace_hex(10), T0, T0 + 0.004, T0 + 0.604, T0 + 0.904, T0 + 2.004, ranks=ranks)


@pytest.mark.parametrize("ranks", [1, 2, 8])
def test_sglang_queue_from_the_waiting_slice_in_an_earlier_batch(ranks: int) -> None:
    norm, _ = normalizer("sglang")
    slices, root = sglang_case(ranks)
    assert norm.records(slices) == []
    assert norm.pending() == 1
    r = only(norm.records(root))
    assert close(r.queue_seconds, 0.5998, 1e-4), "one wait, however many tp ranks wrote it"
    assert close(r.prefill_seconds, 0.3042, 1e-4), "TTFT less the queue (tokenising included)"
    assert close(r.decode_seconds, 1.1, 1e-4)
    assert close(r.ttft_seconds, 0.904, 1e-4) and close(r.e2e_seconds, 2.004, 1e-4)
    err = phase_sum_error(r)
    assert err is not None and abs(err) < 1e-6, err
    assert norm.pending() == 0
    assert nonzero(norm.dropped()) == {"not_a_request": 3 * ranks}, "thread, request_process, prefill_forward"


def test_sglang_root_and_slices_in_one_batch() -> None:
    norm, _ = normalizer("auto")
    slices, root = sglang_case()
    r = only(norm.records(merge(root, slices)))  # the root first in the batch: held, then joined
    assert close(r.queue_seconds, 0.5998, 1e-4)


def test_sglang_root_before_its_slices_waits_for_them() -> None:
    norm, clock = normalizer("sglang", hold_s=10.0)
    slices, root = sglang_case()
    assert norm.records(root) == []
    clock.now += 3
    r = only(norm.records(slices))
    assert close(r.queue_seconds, 0.5998, 1e-4) and close(r.prefill_seconds, 0.3042, 1e-4)
    # the other ranks' copies and later slices: the request is done, nothing waits
    assert norm.records(sglang_slice_spans(trace_hex(10), [("decode_loop", T0 + 1, T0 + 2)])) == []
    assert norm.pending() == 0


def test_sglang_root_without_slices_is_emitted_unsplit_after_the_hold() -> None:
    norm, clock = normalizer("sglang", hold_s=10.0)
    _, root = sglang_case()
    assert norm.records(root) == []
    clock.now += 9.9
    assert norm.flush() == []
    clock.now += 0.2
    r = only(norm.flush())
    assert r.queue_seconds is None and r.prefill_seconds is None, "the reported prefill holds the queue: no split"
    assert close(r.ttft_seconds, 0.904, 1e-4) and close(r.decode_seconds, 1.1, 1e-4)
    assert norm.pending() == 0


def test_sglang_no_hold_emits_at_once() -> None:
    norm, _ = normalizer("sglang", hold_s=0)
    _, root = sglang_case()
    r = only(norm.records(root))
    assert r.queue_seconds is None and r.prefill_seconds is None


def test_sglang_decode_is_e2e_less_ttft_else_from_the_slices() -> None:
    norm, _ = normalizer("sglang")
    tid = trace_hex(11)
    norm.records(sglang_slice_spans(tid, [("prefill_waiting", T0, T0 + 0.2), ("decode_loop", T0 + 0.5, T0 + 1.5)], ranks=2))
    r = only(norm.records(sglang_root_span(tid, T0, prefill=0.5, decode=None, ttft=0.52, e2e=1.6)))
    assert close(r.decode_seconds, 1.08) and close(r.queue_seconds, 0.2) and close(r.prefill_seconds, 0.32)
    # without e2e: the decode_loop slices (per rank, the largest), else the decode_forward slices
    tid = trace_hex(12)
    norm.records(sglang_slice_spans(tid, [("prefill_waiting", T0, T0 + 0.2), ("decode_loop", T0 + 0.5, T0 + 1.5)], ranks=2))
    assert close(only(norm.records(sglang_root_span(tid, T0, prefill=0.5, decode=None, ttft=0.52, e2e=None))).decode_seconds, 1.0)
    tid = trace_hex(13)
    norm.records(
        sglang_slice_spans(
            tid,
            [("prefill_waiting", T0, T0 + 0.2), ("decode_forward", T0 + 0.5, T0 + 0.6), ("decode_forward", T0 + 0.6, T0 + 0.9)],
        )
    )
    assert close(only(norm.records(sglang_root_span(tid, T0, prefill=0.5, decode=None, ttft=0.52, e2e=None))).decode_seconds, 0.4)


def test_sglang_prefill_never_below_zero() -> None:
    norm, _ = normalizer("sglang")
    tid = trace_hex(14)
    norm.records(sglang_slice_spans(tid, [("prefill_waiting", T0, T0 + 0.7)]))
    r = only(norm.records(sglang_root_span(tid, T0, prefill=0.5, decode=1.0, ttft=0.52, e2e=1.6)))
    assert r.prefill_seconds == 0.0 and close(r.queue_seconds, 0.7)


def test_sglang_retracted_request_waits_twice() -> None:
    norm, _ = normalizer("sglang")
    tid = trace_hex(15)
    norm.records(sglang_slice_spans(tid, [("prefill_waiting", T0, T0 + 0.2), ("prefill_waiting", T0 + 0.5, T0 + 0.8)], ranks=2))
    assert close(only(norm.records(sglang_root_span(tid, T0, prefill=1.0, decode=1.0, ttft=1.1, e2e=2.1))).queue_seconds, 0.5)


def test_sglang_pending_is_bounded_by_traces_and_time() -> None:
    norm, clock = normalizer("sglang", max_pending=5, pending_ttl_s=30.0)
    for i in range(8):  # slices whose root never comes
        norm.records(
            sglang_slice_spans(trace_hex(100 + i), [("prefill_waiting", T0, T0 + 0.1), ("decode_loop", T0 + 0.2, T0 + 0.3)])
        )
    assert norm.pending() == 5
    assert norm.dropped()["pending_evicted"] == 3 * 2
    clock.now += 29
    assert norm.flush() == [] and norm.pending() == 5
    clock.now += 2
    norm.flush()
    assert norm.pending() == 0 and norm.dropped()["pending_evicted"] == 8 * 2


def test_held_roots_are_bounded_too() -> None:
    norm, _ = normalizer("sglang", max_pending=3)
    out: list[RequestRecord] = []
    for i in range(5):
        out += norm.records(sglang_root_span(trace_hex(200 + i), T0, prefill=0.5, decode=1.0, ttft=0.52, e2e=1.6))
    assert norm.pending() == 3
    assert [r.trace_id for r in out] == [trace_hex(200), trace_hex(201)], "the oldest held go out unsplit"


# -- TGI -------------------------------------------------------------------------------------


@pytest.mark.parametrize("as_text", [True, False])
@pytest.mark.parametrize("name", ["generate", "generate_stream", "completions", "chat_completions"])
def test_tgi_router_span(name: str, as_text: bool) -> None:
    norm, _ = normalizer("tgi")
    tid = trace_hex(20)
    r = only(norm.records(tgi_request_span(tid, T0, 0.0012, 0.4, 1.6, 40, name=name, as_text=as_text, prompt_tokens=33)))
    assert r.span_id == span_hex(tid, "router")
    assert close(r.queue_seconds, 0.4) and close(r.e2e_seconds, 2.0012)
    assert (r.prefill_seconds, r.decode_seconds, r.ttft_seconds) == (None, None, None), "TGI does not split inference"
    assert (r.prompt_tokens, r.completion_tokens) == (33, 40)
    assert nonzero(norm.dropped()) == {"not_a_request": 1}, "the inner Infer span"


def test_tgi_without_fields_uses_the_children_and_its_own_length() -> None:
    norm, _ = normalizer("auto")
    tid = trace_hex(21)
    req = tgi_request_span(tid, T0, 0.001, 0.3, 1.2, 10, name="generate")
    span = req.resource_spans[0].scope_spans[0].spans[-1]
    keep = [
        kv
        for kv in span.attributes
        if kv.key not in ("total_time", "queue_time", "inference_time", "validation_time", "time_per_token")
    ]
    del span.attributes[:]
    span.attributes.extend(keep)
    r = only(norm.records(req))
    assert close(r.queue_seconds, 0.3) and close(r.e2e_seconds, 1.501)


def test_tgi_failed_request_root_without_anything() -> None:
    norm, _ = normalizer("tgi")
    tid = trace_hex(22)
    span = make_span(tid, span_hex(tid, "r"), "chat_completions", T0, T0 + 0.25)
    r = only(norm.records(export([span], "tgi")))
    assert r.queue_seconds is None and close(r.e2e_seconds, 0.25)
    # the same name under a parent, with no fields: TGI's inner span, not a request
    inner = make_span(tid, span_hex(tid, "i"), "generate", T0, T0 + 0.25, parent_span_id=span_hex(tid, "r"))
    assert norm.records(export([inner], "tgi")) == []
    assert norm.dropped()["not_a_request"] == 1


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1.234567ms", 1.234567e-3),
        ("2.5s", 2.5),
        ("3s", 3.0),
        ("150µs", 150e-6),
        ("150μs", 150e-6),
        ("150us", 150e-6),
        ("12ns", 12e-9),
        ("0ns", 0.0),
        ("0.25", 0.25),
        (" 7 ms ", 7e-3),
        ("1e-3s", 1e-3),
        (".5s", 0.5),
    ],
)
def test_duration_text(text: str, seconds: float) -> None:
    got = parse_duration(text)
    assert got is not None and math.isclose(got, seconds, rel_tol=1e-12, abs_tol=1e-15)


@pytest.mark.parametrize(
    "text", ["", "ms", "1.2.3ms", "-1ms", "1 h", "1m", "abc", "nan", "inf", "1e5000", "1" * 41, "5 s s", "0x10"]
)
def test_duration_text_refused(text: str) -> None:
    got = parse_duration(text)
    assert got is None or not math.isfinite(got), "1e5000 parses to inf, refused by the range check"


@given(st.floats(min_value=0, max_value=MAX_SECONDS))
@PROFILE
def test_rust_durations_read_back(seconds: float) -> None:
    got = parse_duration(rust_duration(seconds))
    assert got is not None and math.isclose(got, round(seconds * 1e9) / 1e9, rel_tol=1e-9, abs_tol=1e-9)


# -- TensorRT-LLM ----------------------------------------------------------------------------


@pytest.mark.parametrize("etype", ["trtllm", "auto"])
def test_trtllm_phases_from_ttft_and_e2e(etype: str) -> None:
    norm, _ = normalizer(etype)
    r = only(norm.records(trtllm_timeline(trace_hex(30), T0, T0 + 0.3, T0 + 0.45, T0 + 1.95, kv_transfer=0.02)))
    assert close(r.queue_seconds, 0.3) and close(r.prefill_seconds, 0.15) and close(r.decode_seconds, 1.5)
    err = phase_sum_error(r)
    assert err is not None and abs(err) < 1e-6, "exact by construction"
    assert (r.prompt_tokens, r.completion_tokens, r.request_id) == (100, 50, "7")


def test_trtllm_ttft_below_queue_clamps_prefill() -> None:
    norm, _ = normalizer("trtllm")
    r = only(norm.records(trtllm_request_span(trace_hex(31), T0, queue=0.5, ttft=0.4, e2e=1.0)))
    assert r.prefill_seconds == 0.0 and close(r.decode_seconds, 0.6)


def test_auto_tells_the_engines_apart() -> None:
    """vLLM and TRT-LLM both name the span llm_request: vLLM's has time_in_model_*; SGLang's
    root has prefill without time_in_queue."""
    norm, _ = normalizer("auto")
    trt = only(norm.records(trtllm_request_span(trace_hex(32), T0, queue=0.2, ttft=0.5, e2e=1.0)))
    assert close(trt.prefill_seconds, 0.3)
    norm.records(sglang_slice_spans(trace_hex(33), [("prefill_waiting", T0, T0 + 0.2)]))
    sgl = only(norm.records(sglang_root_span(trace_hex(33), T0, prefill=0.5, decode=0.5, ttft=0.52, e2e=1.02)))
    assert close(sgl.queue_seconds, 0.2) and close(sgl.prefill_seconds, 0.32)


# -- routing ---------------------------------------------------------------------------------


def routed(
    routing: TraceRouting, service: str | None, resource: dict[str, str | int] | None = None
) -> tuple[list[str], dict[str, int]]:
    norm = SpanNormalizer(routing)
    req = vllm_request_span(trace_hex(40), T0, 0.1, 0.1, 0.1, 0.2, 0.4, 1, 1, "x", service=service, resource=resource)
    return [r.engine for r in norm.records(req)], nonzero(norm.dropped())


def test_routing_by_service_name_and_resource_attribute() -> None:
    routing = TraceRouting.from_engines(
        [("a", "vllm", "vllm-a"), ("b", "vllm", "k8s.pod.name=vllm-b-0"), ("c", "vllm", "unknown_service"), ("d", "tgi", None)]
    )
    assert routed(routing, "vllm-a") == (["a"], {})
    assert routed(routing, "other", {"k8s.pod.name": "vllm-b-0"}) == (["b"], {})
    assert routed(routing, "unknown_service") == (["c"], {})
    assert routed(routing, "unknown_service:python") == (["c"], {}), "the SDK's default with the process name"
    assert routed(routing, None, {"vllm.process_id": 7}) == ([], {"unmatched_engine": 1})
    assert routed(routing, "unknown_service_x") == ([], {"unmatched_engine": 1})


def test_routing_by_an_int_resource_attribute() -> None:
    routing = TraceRouting.from_engines([("a", "vllm", "vllm.process_id=4242"), ("b", "vllm", "x")])
    assert routed(routing, "whatever") == (["a"], {})


def test_one_engine_takes_every_span_unless_it_names_a_service() -> None:
    assert routed(TraceRouting.from_engines([("solo", "auto", None)]), "anything") == (["solo"], {})
    assert routed(TraceRouting.from_engines([("solo", "auto", None)]), None) == (["solo"], {})
    assert routed(TraceRouting.from_engines([("solo", "auto", "vllm-a")]), "vllm-b") == ([], {"unmatched_engine": 1})
    assert routed(TraceRouting.from_engines([]), "vllm-a") == ([], {"unmatched_engine": 1})


def test_unmatched_counts_every_span() -> None:
    norm = SpanNormalizer(TraceRouting.from_engines([("a", "sglang", "sglang-a"), ("b", "sglang", "sglang-b")]))
    slices, _ = sglang_case(ranks=2)
    assert norm.records(slices) == []
    assert nonzero(norm.dropped()) == {"unmatched_engine": 2 * 5}


def test_same_trace_two_engines_stay_apart() -> None:
    """A caller's trace through two engines: each engine's side spans join its own root."""
    norm = SpanNormalizer(TraceRouting.from_engines([("a", "sglang", "sglang-a"), ("b", "sglang", "sglang-b")]))
    tid = trace_hex(41)
    norm.records(sglang_slice_spans(tid, [("prefill_waiting", T0, T0 + 0.2)], service="sglang-a"))
    norm.records(sglang_slice_spans(tid, [("prefill_waiting", T0, T0 + 0.4)], service="sglang-b"))
    ra = only(norm.records(sglang_root_span(tid, T0, prefill=0.5, decode=0.5, ttft=0.52, e2e=1.02, service="sglang-a")))
    rb = only(norm.records(sglang_root_span(tid, T0, prefill=0.5, decode=0.5, ttft=0.52, e2e=1.02, service="sglang-b")))
    assert (ra.engine, rb.engine) == ("a", "b")
    assert close(ra.queue_seconds, 0.2) and close(rb.queue_seconds, 0.4)


@pytest.mark.parametrize(
    ("value", "parsed"),
    [("vllm-a", ("service.name", "vllm-a")), ("k8s.pod.name = p-0", ("k8s.pod.name", "p-0")), ("a=b=c", ("a", "b=c"))],
)
def test_parse_trace_service(value: str, parsed: tuple[str, str]) -> None:
    assert parse_trace_service(value) == parsed


@pytest.mark.parametrize("value", ["", "  ", "=x", "k=", " = "])
def test_parse_trace_service_refuses(value: str) -> None:
    with pytest.raises(ValueError, match="trace_service"):
        parse_trace_service(value)
    with pytest.raises(ValueError):
        TraceRouting.from_engines([("a", "vllm", value)])


# -- hostile values --------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.5, MAX_SECONDS * 2, "soon", True, "-3ms"])
def test_a_bad_phase_is_none_and_counted(bad: object) -> None:
    norm, _ = normalizer("vllm")
    r = only(norm.records(vllm_request_span(trace_hex(50), T0, bad, 0.5, 1.0, 0.6, 1.6, 10, 10, "x")))  # type: ignore[arg-type]
    assert r.queue_seconds is None and r.prefill_seconds == 0.5
    assert nonzero(norm.dropped()) == {"bad_value": 1}


def test_bad_tokens_and_text() -> None:
    norm, _ = normalizer("vllm")
    r = only(
        norm.records(
            vllm_request_span(
                trace_hex(51), T0, 0.1, 0.1, 0.1, 0.2, 0.4, -5, MAX_TOKENS + 1, "x\x00y\n" + "z" * 500, model="m" * 300
            )
        )
    )
    assert (r.prompt_tokens, r.completion_tokens) == (None, None)
    assert r.request_id.startswith("xy") and len(r.request_id) <= MAX_TEXT and r.request_id.isprintable()
    assert r.model == "m" * MAX_TEXT
    assert norm.dropped()["bad_value"] == 1, "counted once per span"
    r = only(norm.records(vllm_request_span(trace_hex(52), T0, 0.1, 0.1, 0.1, 0.2, 0.4, "77", 12.0, 12345)))
    assert (r.prompt_tokens, r.completion_tokens, r.request_id) == (77, 12, "12345")


def test_a_request_span_without_latency_is_missing_attributes() -> None:
    norm, _ = normalizer("vllm")
    assert norm.records(vllm_request_span(trace_hex(53), T0, 0.1, 0.1, 0.1, None, None, 1, 1, "x")) == []
    assert nonzero(norm.dropped()) == {"missing_attributes": 1}
    assert norm.records(vllm_request_span(trace_hex(54), T0, 0.1, 0.1, 0.1, "x", float("nan"), 1, 1, "x")) == []
    assert norm.dropped()["bad_value"] == 1


def test_only_the_ttft_is_enough() -> None:
    norm, _ = normalizer("trtllm")
    r = only(norm.records(trtllm_request_span(trace_hex(55), T0, queue=None, ttft=0.3, e2e=None)))
    assert r.ttft_seconds == 0.3 and r.e2e_seconds is None and r.decode_seconds is None


@pytest.mark.parametrize("trace_id", [b"", b"\x00" * 16, b"\x01" * 15, b"\x01" * 17])
def test_bad_ids(trace_id: bytes) -> None:
    norm, _ = normalizer("vllm")
    req = vllm_request_span(trace_hex(56), T0, 0.1, 0.1, 0.1, 0.2, 0.4, 1, 1, "x")
    req.resource_spans[0].scope_spans[0].spans[0].trace_id = trace_id
    assert norm.records(req) == []
    assert nonzero(norm.dropped()) == {"bad_id": 1}


@pytest.mark.parametrize("start", [0.0, 1.0, 5_000_000_000.0])
def test_impossible_arrival(start: float) -> None:
    norm, _ = normalizer("vllm")
    assert norm.records(vllm_request_span(trace_hex(57), start, 0.1, 0.1, 0.1, 0.2, 0.4, 1, 1, "x")) == []
    assert nonzero(norm.dropped()) == {"bad_value": 1}


def test_first_attribute_wins_and_other_spans_are_not_requests() -> None:
    norm, _ = normalizer("vllm")
    req = vllm_request_span(trace_hex(58), T0, 0.1, 0.1, 0.1, 0.2, 0.4, 1, 1, "x")
    span = req.resource_spans[0].scope_spans[0].spans[0]
    span.attributes.add(key="gen_ai.latency.e2e", value=AnyValue(double_value=99.0))
    span.attributes.add(key="noise", value=AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=1)])))
    other = make_span(trace_hex(58), span_hex(trace_hex(58), "http"), "POST /v1/completions", T0, T0 + 1)
    req.resource_spans[0].scope_spans[0].spans.append(other)
    assert only(norm.records(req)).e2e_seconds == 0.4
    assert nonzero(norm.dropped()) == {"not_a_request": 1}


def test_a_list_valued_latency_is_a_bad_value() -> None:
    norm, _ = normalizer("vllm")
    req = vllm_request_span(trace_hex(59), T0, None, 0.1, 0.1, 0.2, 0.4, 1, 1, "x")
    req.resource_spans[0].scope_spans[0].spans[0].attributes.add(
        key="gen_ai.latency.time_in_queue", value=AnyValue(array_value=ArrayValue(values=[AnyValue(double_value=0.1)]))
    )
    r = only(norm.records(req))
    assert r.queue_seconds is None and norm.dropped()["bad_value"] == 1


KEYS = [
    "gen_ai.latency.time_to_first_token",
    "gen_ai.latency.e2e",
    "gen_ai.latency.time_in_queue",
    "gen_ai.latency.time_in_model_prefill",
    "gen_ai.latency.time_in_model_decode",
    "gen_ai.latency.time_in_model_inference",
    "gen_ai.latency.kv_cache_transfer_time",
    "gen_ai.usage.prompt_tokens",
    "gen_ai.usage.completion_tokens",
    "gen_ai.request.id",
    "gen_ai.response.model",
    "total_time",
    "queue_time",
    "inference_time",
    "prompt_tokens",
    "generated_tokens",
    "parameters",
    "other",
]
ANY = st.one_of(
    st.builds(lambda v: AnyValue(double_value=v), st.floats(allow_nan=True, allow_infinity=True)),
    st.builds(lambda v: AnyValue(int_value=v), st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    st.builds(lambda v: AnyValue(string_value=v), st.text(max_size=300)),
    st.builds(
        lambda v: AnyValue(string_value=v),
        st.from_regex(r"-?[0-9]{0,25}(\.[0-9]{0,12})?(e-?[0-9]{1,4})?(ns|µs|ms|s)?", fullmatch=True),
    ),
    st.builds(lambda v: AnyValue(bool_value=v), st.booleans()),
    st.builds(lambda v: AnyValue(bytes_value=v), st.binary(max_size=20)),
    st.just(AnyValue()),
)
NAMES = st.sampled_from(
    [
        "llm_request",
        "Req 1234",
        "generate",
        "generate_stream",
        "chat_completions",
        "queued",
        "infer",
        "prefill_waiting",
        "decode_loop",
        "decode_forward",
        "x",
    ]
)


@st.composite
def hostile_exports(draw: st.DrawFn) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(1, 3))):
        rs = req.resource_spans.add()
        for key in draw(st.lists(st.sampled_from(["service.name", "k8s.pod.name", "x"]), max_size=3)):
            rs.resource.attributes.append(KeyValue(key=key, value=draw(ANY)))
        spans = rs.scope_spans.add().spans
        for _ in range(draw(st.integers(0, 6))):
            span = spans.add(
                name=draw(NAMES),
                trace_id=draw(st.one_of(st.binary(min_size=16, max_size=16), st.binary(max_size=20))),
                span_id=draw(st.one_of(st.binary(min_size=8, max_size=8), st.binary(max_size=10))),
                parent_span_id=draw(st.binary(max_size=8)),
                start_time_unix_nano=draw(
                    st.one_of(st.integers(0, 2**64 - 1), st.integers(1_600_000_000 * 10**9, 1_800_000_000 * 10**9))
                ),
                end_time_unix_nano=draw(
                    st.one_of(st.integers(0, 2**64 - 1), st.integers(1_600_000_000 * 10**9, 1_800_000_000 * 10**9))
                ),
            )
            for key in draw(st.lists(st.sampled_from(KEYS), max_size=12)):
                span.attributes.append(KeyValue(key=key, value=draw(ANY)))
    return req


def valid(r: RequestRecord) -> None:
    for v in (r.queue_seconds, r.prefill_seconds, r.decode_seconds, r.ttft_seconds, r.e2e_seconds):
        assert v is None or (math.isfinite(v) and 0 <= v <= MAX_SECONDS)
    for n in (r.prompt_tokens, r.completion_tokens):
        assert n is None or 0 <= n <= MAX_TOKENS
    assert len(r.trace_id) == 32 and len(r.span_id) == 16 and r.trace_id == r.trace_id.lower()
    int(r.trace_id, 16), int(r.span_id, 16)
    assert len(r.model) <= MAX_TEXT and len(r.request_id) <= MAX_TEXT
    assert math.isfinite(r.arrival) and r.e2e_seconds is not None or r.ttft_seconds is not None


@given(
    hostile_exports(),
    st.sampled_from(["auto", "vllm", "sglang", "tgi", "trtllm", "llamacpp"]),
    st.sampled_from([None, "unknown_service", "k8s.pod.name=a"]),
)
@EXPORTS
def test_hostile_exports_never_raise(req: ExportTraceServiceRequest, etype: str, service: str | None) -> None:
    norm, clock = normalizer(etype, service, max_pending=4, hold_s=1.0)
    records = norm.records(req)
    clock.now += 2
    records += norm.flush()
    for r in records:
        valid(r)
    assert set(norm.dropped()) == set(IGNORED_REASONS)
    assert norm.pending() <= 8


@given(st.binary(max_size=400))
@PROFILE
def test_random_bytes_that_parse_never_raise(data: bytes) -> None:
    req = ExportTraceServiceRequest()
    try:
        req.ParseFromString(data)
    except Exception:  # noqa: BLE001 - not a message at all: the receiver's 400
        return
    norm, _ = normalizer("auto")
    for r in norm.records(req):
        valid(r)


def test_concurrent_exports_are_counted_once_each() -> None:
    norm, _ = normalizer("auto")
    got: list[RequestRecord] = []
    lock = threading.Lock()

    def work(base: int) -> None:
        for i in range(150):
            out = norm.records(vllm_request_span(trace_hex(base + i), T0, 0.1, 0.1, 0.1, 0.2, 0.4, 1, 1, "x"))
            out += norm.records(export([make_span(trace_hex(base + i), span_hex(trace_hex(base), "h"), "http", T0, T0 + 1)]))
            with lock:
                got.extend(out)

    threads = [threading.Thread(target=work, args=(10_000 * (n + 1),)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(got) == 600 and len({r.trace_id for r in got}) == 600
    assert nonzero(norm.dropped()) == {"not_a_request": 600}
