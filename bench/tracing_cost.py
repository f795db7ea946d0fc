"""Request tracing's cost in-process: spans to explained records, the keep's memory, dcgm-exporter's read.

    python3 -m bench.tracing_cost

Why: the OTLP receiver's consumer runs on its worker threads for every export (normalise,
join with the verdict history, keep), so its cost per span bounds the span rate a node can
take; the reservoir and the verdict history are the tracing layer's memory. The dcgm-exporter
source parses a whole /metrics every GPU interval. Set-up: vLLM ``llm_request`` spans in
batches of 512 (the OpenTelemetry SDK's default batch), one engine, a 15-minute history of
1 s cycles; an 8-GPU dcgm-exporter answer with the full collectors CSV and pod labels.
"""

from __future__ import annotations

import time
import tracemalloc

from bench.harness import percentile


def _spans(batch: int, first: int, t0: float):  # type: ignore[no-untyped-def]
    from tests.tracing.spans import merge, trace_hex, vllm_request_span

    return merge(
        *(
            vllm_request_span(trace_hex(first + i), t0 + i * 0.01, 0.5, 0.1, 1.0, 0.6, 1.6, 512, 64, f"r{first + i}")
            for i in range(batch)
        )
    )


def run(batches: int = 40, batch: int = 512) -> dict[str, float]:
    from exporter.diagnosis import signals as s
    from exporter.diagnosis.verdict import Cause, Verdict
    from exporter.tracing.history import VerdictHistory
    from exporter.tracing.log import RequestLog
    from exporter.tracing.normalize import SpanNormalizer, TraceEngine, TraceRouting

    t0 = time.time() - 900
    history = VerdictHistory()
    cause = Cause("memory", "kv_cache_pressure", 0.9, {}, "", role="primary", summary="KV full")
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for t in range(900):
        v = Verdict(t0 + t, {}, [cause], "degraded", primary=cause, signals={s.KV_USAGE: 1.0, s.WAITING: 9.0, s.SM_MAX: 0.4})
        history.record({"vllm": v})
    history_bytes = sum(x.size_diff for x in tracemalloc.take_snapshot().compare_to(before, "filename"))
    log = RequestLog(SpanNormalizer(TraceRouting([TraceEngine("vllm", "vllm")])), history)
    exports = [_spans(batch, b * batch, t0 + b * 20) for b in range(batches)]
    per_span = []
    mark = tracemalloc.take_snapshot()
    for e in exports:
        start = time.perf_counter()
        log.consume(e)
        per_span.append((time.perf_counter() - start) / batch)
    keep_bytes = sum(x.size_diff for x in tracemalloc.take_snapshot().compare_to(mark, "filename"))
    tracemalloc.stop()
    return {
        "spans": float(batches * batch),
        "held": float(len(log.reservoir)),
        "consume_us_per_span_p50": percentile(per_span, 50) * 1e6,
        "consume_us_per_span_p99": percentile(per_span, 99) * 1e6,
        "history_bytes_900_moments": float(history_bytes),
        "keep_bytes": float(keep_bytes),
        **dcgm_exporter_parse(),
    }


def dcgm_exporter_parse(gpus: int = 8, reads: int = 200) -> dict[str, float]:
    from exporter.gpu.dcgm_exporter import gpus_from_exposition, points_of
    from exporter.gpu.replay import bundled_trace, parse_trace
    from tests.support.dcgm_exporter_text import GpuRow, render

    path = bundled_trace("serving")
    reading = parse_trace(path.read_text(encoding="utf-8"), str(path))[100]
    rows = [GpuRow({**reading, "uuid": f"GPU-{i:08d}"}, index=i, pod=("ns", f"vllm-{i}", "vllm")) for i in range(gpus)]
    text = render(rows)
    took = []
    for _ in range(reads):
        start = time.perf_counter()
        found, _ = gpus_from_exposition(text, "bench")
        points_of(found, True)
        took.append(time.perf_counter() - start)
    return {"dcgm_exporter_bytes": float(len(text)), "dcgm_exporter_read_ms_p50": percentile(took, 50) * 1e3}


def main() -> None:
    for k, v in run().items():
        print(f"{k}: {v:,.1f}")


if __name__ == "__main__":
    main()
