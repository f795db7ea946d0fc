"""vLLM, SGLang, TGI and TensorRT-LLM request spans -> ``RequestRecord`` (docs/tracing.md).

Input: one OTLP ``ExportTraceServiceRequest`` as the receiver (exporter/tracing/receiver.py)
parsed it; every value is read through the message fields, never decoded by hand. Output:
one ``RequestRecord`` per finished request whose span (and, for SGLang and TGI, whose side
spans) said enough. Every span that gives no record and feeds none is counted under one
reason of ``IGNORED_REASONS`` (``SpanNormalizer.dropped``), so the exporter can publish
``llm_trace_spans_ignored_total{reason}``.

Which engine a span belongs to (``TraceRouting``): its resource's ``service.name``, or a
``key=value`` resource attribute, matched to an engine's ``trace_service``; with one
configured engine that names no ``trace_service``, every span is that engine's. The
engine's configured type picks the reader; ``auto`` (and llama.cpp, which sends no spans)
reads the span's shape.

What each engine's request span says, and what the record makes of it (times in seconds):

- vLLM, one SERVER span ``llm_request`` per finished request, start = arrival:
  ``gen_ai.latency.time_in_queue`` (scheduled - queued), ``.time_in_model_prefill`` (first
  token - scheduled), ``.time_in_model_decode`` (last token - first token),
  ``.time_to_first_token``, ``.e2e``, ``gen_ai.usage.prompt_tokens`` /
  ``.completion_tokens``, ``gen_ai.request.id``. The model's own prefill and decode cover
  queued -> last token only, while e2e runs from the front end's arrival to the output
  processor's finish (a real CPU vLLM: 8 ms of a 100 ms request outside them: tokenising,
  the front end -> engine core hop, detokenising). So the record partitions e2e: queue =
  ``time_in_queue``, prefill = ttft - queue (the front end's share before the first token
  included), decode = e2e - ttft (never below 0): the three add up to e2e exactly. The
  model-only figures stand in only when TTFT or e2e is missing.
- SGLang, a root span per request (``Req <rid>``, ``gen_ai.*`` attributes; under it one
  thread span per process and tp rank, under those the stage slices): the same
  ``gen_ai.latency`` keys, **but** ``time_in_model_prefill`` runs from the dispatch to the
  scheduler to the first token, the queue wait included, and there is no
  ``time_in_queue``. The queue is the ``prefill_waiting`` slice(s) of the same trace:
  summed per thread span (a retracted request waits again) and the largest per-rank sum
  taken (every tp rank writes its own slice of the same wait); prefill = reported prefill -
  queue, never below 0. Decode: the reported ``time_in_model_decode``, else the
  ``decode_loop`` slices, else the ``decode_forward`` slices (per-rank sums, the largest),
  else e2e - ttft. With TTFT and e2e, as for vLLM: prefill = ttft - queue and decode =
  e2e - ttft, so the phases add up to e2e (which also holds the tokenisation before the
  dispatch). Slices and root are exported by different processes,
  so either may come first: slices wait in a bounded pending buffer keyed by trace (at most
  ``max_pending`` traces, ``pending_ttl_s`` seconds, then dropped and counted
  ``pending_evicted``), and a root whose ``prefill_waiting`` slice has not come waits up to
  ``hold_s`` seconds for it (``flush`` emits it then without the split: queue and prefill
  None, since the reported prefill holds both).
- TGI, router spans ``generate``, ``generate_stream``, ``completions``,
  ``chat_completions`` with the fields ``total_time``, ``validation_time``, ``queue_time``,
  ``inference_time``, ``time_per_token``. TGI records them with Rust's ``{:?}`` of a
  ``Duration``: text such as ``"1.234567ms"``, ``"2.5s"``, ``"150µs"``, ``"12ns"``. Read: a
  number is seconds; text is a decimal number with an optional unit ``ns``, ``us``/``µs``/
  ``μs``, ``ms`` or ``s`` (none = seconds), nothing else. queue = ``queue_time`` (else the
  ``queued`` child span's duration), e2e = ``total_time`` (else the span's own duration).
  TGI reports neither the first token nor a prefill/decode split (``inference_time`` is
  both), so prefill, decode and ttft are None; validation (tokenising) + queue + inference =
  total. Tokens from ``prompt_tokens`` / ``generated_tokens`` (forks such as LoRAX) or
  ``gen_ai.usage.*`` when present.
- TensorRT-LLM (``trtllm-serve``), a request span with ``.time_to_first_token``, ``.e2e``,
  ``.time_in_queue`` (first scheduled - arrival), ``.kv_cache_transfer_time``,
  ``gen_ai.usage.*``: prefill = ttft - queue, decode = e2e - ttft (never below 0), so the
  three add up to e2e exactly. The KV-cache transfer (disaggregated serving) lies inside
  them and is not a phase of its own.

Every number is checked: not a number, infinite, negative or longer than a day -> that value
None and the span counted ``bad_value`` once (its record is still kept); an arrival outside
2000..2100 drops the span (``bad_value``); a trace or span id that is not 16/8 bytes, or all
zero, drops it (``bad_id``). Strings are cut to ``MAX_TEXT`` printable characters; ids are
lowercase hex.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from exporter.schema import TRACE_SPAN_IGNORE_REASONS
from exporter.tracing.record import RequestRecord

#: why a span gave no record (``SpanNormalizer.dropped``; ``llm_trace_spans_ignored_total{reason}``):
#: ``unmatched_engine``: no engine's ``trace_service`` matches its resource, and no sole engine
#: without one takes every span;
#: ``not_a_request``: no request span of any engine (SGLang's thread and unused stage slices,
#: TGI's inner spans, an HTTP framework's spans, a side span arriving after its request was emitted);
#: ``missing_attributes``: a request span without the latency it must carry (e2e or ttft);
#: ``bad_value``: a value not a number, negative or over a day (the record is kept, that value
#: None), an impossible arrival, or a side span whose end is before its start (the span is
#: dropped); ``bad_id``: a trace or span id not 16/8
#: bytes or all zero; ``pending_evicted``: a buffered SGLang/TGI side span whose request span never
#: came within ``pending_ttl_s`` or ``max_pending`` traces.
IGNORED_REASONS: tuple[str, ...] = TRACE_SPAN_IGNORE_REASONS  # the schema's vocabulary (one source of names)
#: the engine types a span is read as (exporter/engines/config.py ENGINE_TYPES; the others,
#: ``auto`` and ``llamacpp`` included, are read by the span's shape)
READERS: tuple[str, ...] = ("vllm", "sglang", "tgi", "trtllm")
#: the longest model name or request id kept (characters)
MAX_TEXT = 200
#: the longest duration believed (seconds): one day
MAX_SECONDS = 86_400.0
#: the most tokens believed in one prompt or completion
MAX_TOKENS = 1_000_000_000
#: arrivals believed: 2000-01-01 .. 2100-01-01 (Unix seconds)
MIN_ARRIVAL, MAX_ARRIVAL = 946_684_800.0, 4_102_444_800.0
#: the relative gap allowed between queue + prefill + decode and e2e (``phase_sum_error``)
PHASE_SUM_TOLERANCE = 0.05
#: per pending trace and side-span kind, the most parent spans (threads, tp ranks) summed apart
MAX_GROUPS = 16

DEFAULT_MAX_PENDING = 2048
DEFAULT_PENDING_TTL_S = 30.0
DEFAULT_HOLD_S = 10.0

SERVICE_NAME = "service.name"
#: the OpenTelemetry SDKs' service name when none is set (Python: ``unknown_service``, others
#: ``unknown_service:<process>``); a ``trace_service`` of exactly this matches every variant
UNKNOWN_SERVICE = "unknown_service"

_TTFT = "gen_ai.latency.time_to_first_token"
_E2E = "gen_ai.latency.e2e"
_QUEUE = "gen_ai.latency.time_in_queue"
_PREFILL = "gen_ai.latency.time_in_model_prefill"
_DECODE = "gen_ai.latency.time_in_model_decode"
_INFERENCE = "gen_ai.latency.time_in_model_inference"
_KV_TRANSFER = "gen_ai.latency.kv_cache_transfer_time"
_PROMPT = "gen_ai.usage.prompt_tokens"
_COMPLETION = "gen_ai.usage.completion_tokens"
_REQUEST_ID = "gen_ai.request.id"
_RESPONSE_MODEL = "gen_ai.response.model"
_REQUEST_MODEL = "gen_ai.request.model"
_GEN_AI_LATENCY = (_TTFT, _E2E, _QUEUE, _PREFILL, _DECODE, _INFERENCE, _KV_TRANSFER)
_IN_MODEL = (_PREFILL, _DECODE, _INFERENCE)

#: TGI's router request spans and their timing fields
TGI_REQUEST_SPANS = frozenset({"generate", "generate_stream", "completions", "chat_completions"})
_TGI_FIELDS = ("total_time", "validation_time", "queue_time", "inference_time", "time_per_token")
_TGI_TOKENS = ("prompt_tokens", "generated_tokens")
#: the side spans kept until their request span comes: SGLang's stage slices, TGI's children
SGLANG_SLICES = frozenset({"prefill_waiting", "decode_loop", "decode_forward"})
TGI_CHILDREN = frozenset({"queued", "infer"})

_WANTED = frozenset(
    _GEN_AI_LATENCY
    + (_PROMPT, _COMPLETION, _REQUEST_ID, _RESPONSE_MODEL, _REQUEST_MODEL, "parameters")
    + _TGI_FIELDS
    + _TGI_TOKENS
)
_DURATION = re.compile(r"\s*((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?)\s*(ns|us|µs|μs|ms|s)?\s*")
_UNIT = {None: 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9}
#: the longest duration text read (``"18446744073.709551615s"`` is 22)
_MAX_DURATION_TEXT = 40


def parse_duration(text: str) -> float | None:
    """Seconds from a duration's text: ``"0.25"``, ``"1.2ms"``, ``"150µs"``, ``"2.5s"``, ``"12ns"``
    (Rust's ``{:?}`` of a ``Duration``, which TGI records); None for anything else. Not range-checked."""
    if len(text) > _MAX_DURATION_TEXT:
        return None
    m = _DURATION.fullmatch(text)
    if m is None:
        return None
    return float(m.group(1)) * _UNIT[m.group(2)]


def parse_trace_service(value: str) -> tuple[str, str]:
    """An engine's ``trace_service`` -> (resource attribute, value): ``"vllm-a"`` is
    (``service.name``, ``"vllm-a"``), ``"k8s.pod.name=vllm-0"`` is (``k8s.pod.name``, ``"vllm-0"``).
    Raises ValueError for an empty name, key or value."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("trace_service: expected a service.name or key=value, got an empty value")
    if "=" not in value:
        return SERVICE_NAME, value.strip()
    key, _, wanted = value.partition("=")
    key, wanted = key.strip(), wanted.strip()
    if not key or not wanted:
        raise ValueError(f"trace_service: expected key=value with both parts, got {value!r}")
    return key, wanted


@dataclass(frozen=True)
class TraceEngine:
    """One configured engine as the tracing layer sees it."""

    name: str
    type: str
    trace_service: str | None = None


class TraceRouting:
    """Which configured engine a resource's spans belong to.

    A resource matches an engine whose ``trace_service`` names its ``service.name`` (a
    ``trace_service`` of ``unknown_service`` also matches ``unknown_service:<process>``) or,
    written ``key=value``, whose resource attribute ``key`` reads ``value``; the first such
    engine in configuration order wins. Else, when exactly one engine is configured and it
    names no ``trace_service``, that engine (an engine that names one wants only those
    spans). Else none: the spans are dropped as ``unmatched_engine``.
    """

    def __init__(self, engines: Sequence[TraceEngine]) -> None:
        self.engines: tuple[TraceEngine, ...] = tuple(engines)
        self._matchers: list[tuple[str, str, TraceEngine]] = []
        for engine in self.engines:
            if engine.trace_service is not None:
                key, wanted = parse_trace_service(engine.trace_service)
                self._matchers.append((key, wanted, engine))
        #: the resource attributes routing reads
        self.keys: frozenset[str] = frozenset({SERVICE_NAME} | {key for key, _, _ in self._matchers})
        only = self.engines[0] if len(self.engines) == 1 else None
        self._default = only if only is not None and only.trace_service is None else None

    @classmethod
    def from_engines(cls, engines: Sequence[tuple[str, str, str | None]]) -> TraceRouting:
        """From the configuration: (``engines[].name``, ``.type``, ``.trace_service``) each."""
        return cls([TraceEngine(name, etype, service) for name, etype, service in engines])

    def route(self, resource: Mapping[str, str]) -> TraceEngine | None:
        """The engine of a resource whose attributes (as text) are ``resource``; None: no engine."""
        for key, wanted, engine in self._matchers:
            got = resource.get(key)
            if got is None:
                continue
            if got == wanted or (key == SERVICE_NAME and wanted == UNKNOWN_SERVICE and got.startswith(UNKNOWN_SERVICE + ":")):
                return engine
        return self._default


def phase_sum_error(record: RequestRecord) -> float | None:
    """(queue + prefill + decode - e2e) / e2e when all four are known and e2e > 0, else None.

    Within ``PHASE_SUM_TOLERANCE`` for every engine that reports all of them (docs/tracing.md):
    TensorRT-LLM exactly, vLLM and SGLang short of e2e by the time before scheduling."""
    q, p, d, e2e = record.queue_seconds, record.prefill_seconds, record.decode_seconds, record.e2e_seconds
    if q is None or p is None or d is None or e2e is None or e2e <= 0:
        return None
    return (q + p + d - e2e) / e2e


def _text_of(value: AnyValue) -> str | None:
    """An attribute value as routing text (None: a list, map or bytes)."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return str(value.string_value)[:MAX_TEXT]
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    if kind == "int_value":
        return str(value.int_value)
    if kind == "double_value":
        return repr(value.double_value)
    return None


def _hex_id(raw: bytes, size: int) -> str | None:
    if len(raw) != size or not any(raw):
        return None
    return raw.hex()


def _printable(text: str) -> str:
    return "".join(ch for ch in text[:MAX_TEXT] if ch.isprintable())


class _Reader:
    """One span's wanted attributes, read and range-checked; ``bad`` once any was not believed."""

    def __init__(self, attributes: Iterable[KeyValue]) -> None:
        self.values: dict[str, AnyValue] = {}
        for kv in attributes:
            key = kv.key
            if key in _WANTED and key not in self.values:
                self.values[key] = kv.value
        self.bad = False

    def has(self, *keys: str) -> bool:
        return any(self._set(key) for key in keys)

    def _set(self, key: str) -> bool:
        value = self.values.get(key)
        return value is not None and value.WhichOneof("value") is not None

    def seconds(self, key: str) -> float | None:
        value = self.values.get(key)
        if value is None:
            return None
        kind = value.WhichOneof("value")
        number: float | None
        if kind is None:
            return None
        if kind == "double_value":
            number = float(value.double_value)
        elif kind == "int_value":
            number = float(value.int_value)
        elif kind == "string_value":
            number = parse_duration(value.string_value)
        else:
            number = None
        return self._checked(number)

    def _checked(self, number: float | None) -> float | None:
        if number is None or not math.isfinite(number) or number < 0 or number > MAX_SECONDS:
            self.bad = True
            return None
        return number

    def count(self, *keys: str) -> int | None:
        """The first of ``keys`` that is set, as a token count."""
        for key in keys:
            value = self.values.get(key)
            kind = None if value is None else value.WhichOneof("value")
            if value is None or kind is None:
                continue
            number: int | None = None
            if kind == "int_value":
                number = int(value.int_value)
            elif kind == "double_value":
                d = float(value.double_value)
                number = int(d) if math.isfinite(d) and d.is_integer() and abs(d) <= MAX_TOKENS else None
            elif kind == "string_value":
                s = value.string_value.strip()
                number = int(s) if 0 < len(s) <= 12 and s.isascii() and s.isdigit() else None
            if number is None or not 0 <= number <= MAX_TOKENS:
                self.bad = True
                return None
            return number
        return None

    def text(self, *keys: str) -> str:
        """The first of ``keys`` that is set, as bounded printable text ("" when none)."""
        for key in keys:
            value = self.values.get(key)
            kind = None if value is None else value.WhichOneof("value")
            if value is None or kind is None:
                continue
            if kind == "string_value":
                return _printable(value.string_value)
            if kind == "int_value":
                return str(value.int_value)
            self.bad = True
            return ""
        return ""


def _duration(span: Span) -> float | None:
    """A span's own length, seconds (None when its times are missing or impossible)."""
    start, end = int(span.start_time_unix_nano), int(span.end_time_unix_nano)
    if start <= 0 or end < start:
        return None
    seconds = (end - start) / 1e9
    return seconds if seconds <= MAX_SECONDS else None


@dataclass
class _Parts:
    """The side spans of one trace seen so far: per kind, per parent span, summed seconds."""

    since: float
    spans: int = 0
    sums: dict[str, dict[bytes, float]] = field(default_factory=dict)

    def add(self, kind: str, parent: bytes, seconds: float) -> None:
        self.spans += 1
        groups = self.sums.setdefault(kind, {})
        if parent in groups:
            groups[parent] += seconds
        elif len(groups) < MAX_GROUPS:
            groups[parent] = seconds

    def total(self, kind: str) -> float | None:
        """The largest per-parent sum of ``kind`` (every tp rank writes its own slice of one wait)."""
        groups = self.sums.get(kind)
        return max(groups.values()) if groups else None


@dataclass
class _Request:
    """A request span as read, before the side spans are joined."""

    reader: str
    engine: str
    model: str
    trace_id: str
    span_id: str
    request_id: str
    arrival: float
    queue: float | None
    prefill: float | None
    decode: float | None
    ttft: float | None
    e2e: float | None
    prompt: int | None
    completion: int | None
    #: the span's own length (TGI's e2e when ``total_time`` is absent)
    duration: float | None


def _shape(etype: str, span: Span, attrs: _Reader) -> str | None:
    """What a span is: a reader name (a request span), ``slice:<kind>`` (a side span kept), or None."""
    latency = attrs.has(*_GEN_AI_LATENCY)
    name = span.name
    if latency:
        if etype in ("vllm", "sglang", "trtllm"):
            return etype
        if attrs.has(_PREFILL) and not attrs.has(_QUEUE):
            return "sglang"
        if attrs.has(*_IN_MODEL):
            return "vllm"
        return "trtllm"
    by_shape = etype not in READERS
    sglang, tgi = by_shape or etype == "sglang", by_shape or etype == "tgi"
    if sglang and name in SGLANG_SLICES:
        return "slice:" + name
    if tgi and name in TGI_CHILDREN:
        return "slice:" + name
    if tgi and name in TGI_REQUEST_SPANS and (attrs.has(*_TGI_FIELDS, "parameters") or not span.parent_span_id):
        return "tgi"
    return None


class SpanNormalizer:
    """OTLP trace exports -> ``RequestRecord``s, with the ignored spans counted by reason.

    Thread-safe (one lock): the gRPC and HTTP receivers may call ``records`` at once.
    Memory: at most ``max_pending`` traces of side spans (each at most ``MAX_GROUPS`` sums per
    kind), ``max_pending`` held SGLang roots and ``max_pending`` recently finished trace keys.
    Measured (``tracemalloc``, CPython 3.11): a pending trace of SGLang slices 1.5 KB (one tp
    rank) to 5.7 KB (``MAX_GROUPS`` parents for each of the three slice kinds, the most), a
    held root 1.25 KB with 200-character strings plus its slices; so at the defaults
    (2048) about 3 MB in ordinary use and never above ~26 MB.
    ``clock`` (monotonic seconds) times the pending buffer only; record times come from spans.
    """

    def __init__(
        self,
        routing: TraceRouting,
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
        pending_ttl_s: float = DEFAULT_PENDING_TTL_S,
        hold_s: float = DEFAULT_HOLD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_pending < 1 or not pending_ttl_s > 0 or not hold_s >= 0:
            raise ValueError("max_pending >= 1, pending_ttl_s > 0 and hold_s >= 0 expected")
        self.routing = routing
        self.max_pending = max_pending
        self.pending_ttl_s = pending_ttl_s
        self.hold_s = hold_s
        self._clock = clock
        self._lock = threading.Lock()
        self._dropped = dict.fromkeys(IGNORED_REASONS, 0)
        #: (engine, trace id) -> side spans waiting for their request span
        self._parts: OrderedDict[tuple[str, bytes], _Parts] = OrderedDict()
        #: (engine, trace id) -> an SGLang root waiting for its queue slice, since when
        self._held: OrderedDict[tuple[str, bytes], tuple[_Request, _Parts | None, float]] = OrderedDict()
        #: (engine, trace id) of requests already emitted: their late side spans are not pending
        self._done: OrderedDict[tuple[str, bytes], None] = OrderedDict()

    def records(self, request: ExportTraceServiceRequest) -> list[RequestRecord]:
        """The finished requests one export holds (and any held SGLang root whose wait ran out)."""
        with self._lock:
            out = self._expire()
            for resource_spans in request.resource_spans:
                resource: dict[str, str] = {}
                for kv in resource_spans.resource.attributes:
                    if kv.key in self.routing.keys and kv.key not in resource:
                        text = _text_of(kv.value)
                        if text is not None:
                            resource[kv.key] = text
                engine = self.routing.route(resource)
                for scope_spans in resource_spans.scope_spans:
                    if engine is None:
                        self._dropped["unmatched_engine"] += len(scope_spans.spans)
                        continue
                    for span in scope_spans.spans:
                        self._span(engine, span, out)
            return out

    def flush(self) -> list[RequestRecord]:
        """Held SGLang roots whose wait ran out (call now and then when no export comes)."""
        with self._lock:
            return self._expire()

    def dropped(self) -> dict[str, int]:
        """Spans ignored so far, by reason: every reason of ``IGNORED_REASONS``, zeros included."""
        with self._lock:
            return dict(self._dropped)

    def pending(self) -> int:
        """Traces buffered now (side spans waiting, roots held)."""
        with self._lock:
            return len(self._parts) + len(self._held)

    # -- one span ----------------------------------------------------------------------------

    def _span(self, engine: TraceEngine, span: Span, out: list[RequestRecord]) -> None:
        attrs = _Reader(span.attributes)
        shape = _shape(engine.type, span, attrs)
        if shape is None:
            self._dropped["not_a_request"] += 1
            return
        raw_trace = bytes(span.trace_id)
        trace_id, span_id = _hex_id(raw_trace, 16), _hex_id(bytes(span.span_id), 8)
        if trace_id is None or span_id is None:
            self._dropped["bad_id"] += 1
            return
        key = (engine.name, raw_trace)
        if shape.startswith("slice:"):
            self._side_span(key, shape[len("slice:") :], span, out)
            return
        parsed = self._read(engine, shape, span, attrs, trace_id, span_id)
        if parsed is None:
            return
        parts = self._parts.pop(key, None)
        if (
            shape == "sglang"
            and parsed.queue is None
            and self.hold_s > 0
            and (parts is None or parts.total("prefill_waiting") is None)
        ):
            self._held[key] = (parsed, parts, self._clock())
            self._held.move_to_end(key)
            while len(self._held) > self.max_pending:
                _, (old, old_parts, _) = self._held.popitem(last=False)
                out.append(self._finish(old, old_parts))
            return
        out.append(self._finish(parsed, parts))
        if shape in ("sglang", "tgi"):  # the readers with side spans: a late one is not pending
            self._mark_done(key)

    def _side_span(self, key: tuple[str, bytes], kind: str, span: Span, out: list[RequestRecord]) -> None:
        seconds = _duration(span)
        if seconds is None:
            self._dropped["bad_value"] += 1
            return
        parent = bytes(span.parent_span_id)
        held = self._held.get(key)
        if held is not None:
            request, parts, since = held
            parts = parts if parts is not None else _Parts(since=since)
            parts.add(kind, parent, seconds)
            if kind == "prefill_waiting":
                del self._held[key]
                out.append(self._finish(request, parts))
                self._mark_done(key)
            else:
                self._held[key] = (request, parts, since)
            return
        if key in self._done:
            self._dropped["not_a_request"] += 1
            return
        parts_now = self._parts.get(key)
        if parts_now is None:
            parts_now = self._parts[key] = _Parts(since=self._clock())
            while len(self._parts) > self.max_pending:
                _, old = self._parts.popitem(last=False)
                self._dropped["pending_evicted"] += old.spans
        parts_now.add(kind, parent, seconds)

    def _read(self, engine: TraceEngine, reader: str, span: Span, attrs: _Reader, trace_id: str, span_id: str) -> _Request | None:
        start = int(span.start_time_unix_nano)
        arrival = start / 1e9
        if not MIN_ARRIVAL <= arrival <= MAX_ARRIVAL:
            self._dropped["bad_value"] += 1
            return None
        if reader == "tgi":
            queue, prefill, decode, ttft = attrs.seconds("queue_time"), None, None, None
            e2e = attrs.seconds("total_time")
            for other in ("validation_time", "inference_time", "time_per_token"):
                attrs.seconds(other)  # checked, so a bad one is counted; not a phase of the record
            prompt = attrs.count(_PROMPT, "prompt_tokens")
            completion = attrs.count(_COMPLETION, "generated_tokens")
        else:
            queue, prefill, decode = attrs.seconds(_QUEUE), attrs.seconds(_PREFILL), attrs.seconds(_DECODE)
            ttft, e2e = attrs.seconds(_TTFT), attrs.seconds(_E2E)
            attrs.seconds(_INFERENCE)
            attrs.seconds(_KV_TRANSFER)
            prompt, completion = attrs.count(_PROMPT), attrs.count(_COMPLETION)
        duration = _duration(span)
        if e2e is None and ttft is None and not (reader == "tgi" and duration is not None):
            self._dropped["bad_value" if attrs.bad else "missing_attributes"] += 1
            return None
        if attrs.bad:
            self._dropped["bad_value"] += 1
        return _Request(
            reader=reader,
            engine=engine.name,
            model=attrs.text(_RESPONSE_MODEL, _REQUEST_MODEL),
            trace_id=trace_id,
            span_id=span_id,
            request_id=attrs.text(_REQUEST_ID),
            arrival=arrival,
            queue=queue,
            prefill=prefill,
            decode=decode,
            ttft=ttft,
            e2e=e2e,
            prompt=prompt,
            completion=completion,
            duration=duration,
        )

    def _finish(self, r: _Request, parts: _Parts | None) -> RequestRecord:
        queue, prefill, decode, e2e = r.queue, r.prefill, r.decode, r.e2e
        if r.reader == "tgi":
            if queue is None and parts is not None:
                queue = parts.total("queued")
            if e2e is None:
                e2e = r.duration
        elif r.reader == "sglang" and queue is None:
            # the reported prefill holds the queue wait: split it with the prefill_waiting slice,
            # or, without one, report neither
            queue = parts.total("prefill_waiting") if parts is not None else None
            prefill = None if queue is None or prefill is None else max(0.0, prefill - queue)
            if decode is None and parts is not None:
                decode = parts.total("decode_loop")
                decode = decode if decode is not None else parts.total("decode_forward")
        if r.reader != "tgi":
            # the phases partition the request's life (docs/tracing.md): what is not the scheduler's
            # queue before the first token is prefill (tokenising and the hop to the engine core
            # included), everything after it decode; the engine's model-only figures are used only
            # when TTFT or e2e are missing
            if r.ttft is not None and queue is not None:
                prefill = max(0.0, r.ttft - queue)
            if e2e is not None and r.ttft is not None:
                decode = max(0.0, e2e - r.ttft)
        return RequestRecord(
            engine=r.engine,
            model=r.model,
            trace_id=r.trace_id,
            span_id=r.span_id,
            request_id=r.request_id,
            arrival=r.arrival,
            queue_seconds=queue,
            prefill_seconds=prefill,
            decode_seconds=decode,
            ttft_seconds=r.ttft,
            e2e_seconds=e2e,
            prompt_tokens=r.prompt,
            completion_tokens=r.completion,
        )

    # -- the pending buffer ------------------------------------------------------------------

    def _mark_done(self, key: tuple[str, bytes]) -> None:
        self._done[key] = None
        self._done.move_to_end(key)
        while len(self._done) > self.max_pending:
            self._done.popitem(last=False)

    def _expire(self) -> list[RequestRecord]:
        now = self._clock()
        out: list[RequestRecord] = []
        while self._parts:
            key, waiting = next(iter(self._parts.items()))
            if now - waiting.since < self.pending_ttl_s:
                break
            del self._parts[key]
            self._dropped["pending_evicted"] += waiting.spans
        while self._held:
            key, (request, parts, since) = next(iter(self._held.items()))
            if now - since < self.hold_s:
                break
            del self._held[key]
            out.append(self._finish(request, parts))
            self._mark_done(key)
        return out


__all__ = [
    "IGNORED_REASONS",
    "PHASE_SUM_TOLERANCE",
    "SpanNormalizer",
    "TraceEngine",
    "TraceRouting",
    "parse_duration",
    "parse_trace_service",
    "phase_sum_error",
]
