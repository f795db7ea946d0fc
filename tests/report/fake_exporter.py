"""An exporter-like HTTP app on 127.0.0.1: /diagnosis (a recorded verdict) and /metrics (text whose
counters and histograms move with every scrape), enough for `report` to chart every layer."""

from __future__ import annotations

import copy
import json
import threading
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

HERE = Path(__file__).resolve().parent


def recorded_verdict() -> dict[str, Any]:
    """A /diagnosis?signals=1 body recorded from the live diagnosis fixture (PCIe copy, TTFT over the SLO)."""
    verdict: dict[str, Any] = json.loads((HERE / "verdict_degraded.json").read_text(encoding="utf-8"))
    return verdict


def rich_verdict() -> dict[str, Any]:
    """The recorded verdict plus a contributing cause and a warning, and a parallel skew in the evidence."""
    v = recorded_verdict()
    contributing = {
        "layer": "memory",
        "cause": "kv_cache_pressure",
        "score": 0.6,
        "confidence": 0.55,
        "role": "contributing",
        "summary": "KV cache 97 % full, 0.4 preemptions/s",
        "explains": ["ttft_high"],
        "evidence": {"max_over_window(max(llm_kv_cache_usage_ratio))": 0.97, "rate(llm_kv_cache_preemptions_total)": 0.4},
        "advice": "The KV cache is nearly full: "
        + "raise gpu_memory_utilization or shorten max_model_len; " * 6
        + "END-OF-ADVICE.",
    }
    warning = {
        "layer": "parallel",
        "cause": "tp_imbalance",
        "score": 0.3,
        "confidence": 0.4,
        "role": "warning",
        "summary": "SM-active skew 1.8 over 2 GPUs",
        "explains": [],
        "evidence": {'llm_parallel_sm_active_skew_ratio{group="tp0"}': 1.8, "max(llm_gpu_sm_active_ratio)": 0.0},
        "advice": "One GPU of the group does most of the work.",
    }
    v["contributing"] = [contributing]
    v["bottlenecks"] = [v["bottlenecks"][0], contributing, *v["bottlenecks"][1:], warning]
    v["layers"]["parallel"].update(
        {"score": 0.3, "status": "warning", "headroom": 0.45, "limit": "SM-active skew 1.8; 45 % headroom"}
    )
    return v


class FakeExporter:
    """State behind the app: scrapes counted, so counters and histograms grow between polls."""

    def __init__(self, verdict: dict[str, Any] | None = None) -> None:
        self.verdict = verdict if verdict is not None else recorded_verdict()
        self.scrapes = 0
        self.lock = threading.Lock()

    def metrics(self) -> str:
        with self.lock:
            self.scrapes += 1
            n = self.scrapes
        lines = []
        for layer, info in self.verdict["layers"].items():
            score = "NaN" if info["score"] is None else repr(float(info["score"]))
            room = "NaN" if info["headroom"] is None else repr(float(info["headroom"]))
            lines += [f'llm_bottleneck_score{{layer="{layer}"}} {score}', f'llm_layer_headroom_ratio{{layer="{layer}"}} {room}']
        for state in ("degraded", "healthy", "unknown"):
            lines.append(f'llm_service_state{{state="{state}"}} {1.0 if state == self.verdict["state"] else 0.0}')
        lines.append('llm_symptom_active{symptom="ttft_high"} 1.0')
        lines.append('llm_symptom_active{symptom="queueing"} 0.0')
        gpu = 'gpu="0",uuid="GPU-0"'
        eng = 'server="s",engine="vllm",model="m",rank="0"'
        lines += [
            f"llm_gpu_utilization_ratio{{{gpu}}} 0.99",
            f"llm_gpu_sm_active_ratio{{{gpu}}} 0.0",
            f"llm_gpu_dram_active_ratio{{{gpu}}} 0.01",
            f"llm_gpu_tensor_active_ratio{{{gpu}}} 0.0",
            f"llm_gpu_pcie_transmit_bytes_per_second{{{gpu}}} 2.9e10",
            f"llm_gpu_pcie_receive_bytes_per_second{{{gpu}}} 2.9e10",
            f"llm_kv_cache_usage_ratio{{{eng}}} 0.1",
            f"llm_kv_cache_preemptions_total{{{eng}}} {n * 0.5}",
            f"llm_scheduler_requests_waiting{{{eng}}} {n % 3}",
            f"llm_scheduler_requests_running{{{eng}}} 4",
            'llm_process_busiest_thread_cpu_ratio{server="s"} 0.35',
            'llm_parallel_sm_active_skew_ratio{group="tp0"} 1.8',
            f"llm_spec_decode_draft_tokens_total{{{eng}}} {n * 100}",
            f"llm_spec_decode_accepted_tokens_total{{{eng}}} {n * 60}",
        ]
        bounds = ("0.5", "1.0", "2.5", "5.0", "+Inf")
        for name, fast in (("llm_request_ttft_seconds", False), ("llm_request_inter_token_seconds", True)):
            lines.append(f"# TYPE {name} histogram")
            per = [0, 0, 0, 10, 10] if not fast else [10, 10, 10, 10, 10]  # TTFT ~3-5 s, ITL < 0.5 s
            for le, c in zip(bounds, per):
                lines.append(f'{name}_bucket{{{eng},le="{le}"}} {c * n}')
            lines.append(f"{name}_sum{{{eng}}} {n * 40.0}")
            lines.append(f"{name}_count{{{eng}}} {n * 10}")
        return "\n".join(lines) + "\n"

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/diagnosis")
        def diagnosis(request: Request) -> JSONResponse:
            body = copy.deepcopy(self.verdict)
            body["timestamp"] = time.time()
            if request.query_params.get("signals") not in ("1", "true"):
                body.pop("signals", None)
            return JSONResponse(body)

        @app.get("/metrics")
        def metrics() -> PlainTextResponse:
            return PlainTextResponse(self.metrics(), media_type="text/plain; version=0.0.4")

        return app
