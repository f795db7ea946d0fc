"""The profile route against the real CPU vLLM started with its profiler directory: the trace is real.

The real tier's shared CPU vLLM (``cpu_vllm`` in tests/conftest.py, started with its
profiler directory) runs torch.profiler on CPU: its
traces have CPU operators and no GPU kernels. So the route is driven for real (start, a
few completions, stop, the gzipped traces read from the directory), and with no GPU
kernels the CPU operators' split (self time) is the split: answered as ``shares`` with
``"basis": "cpu_ops"`` and published as llm_operator_time_share, it shows where the CPU
model's time went: its oneDNN matmuls and its attention (issue 23's proof).
"""

from __future__ import annotations

import math
import threading
import time

import httpx
import pytest

from exporter.engines.textparse import parse
from tests.integration.integration_helpers import CpuVllm, Proc, engine_priority
from tests.support.ports import free_port
from tests.support.processes import exporter_argv
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.timeout(900)]


def _load(base: str, model: str, stop: threading.Event) -> None:
    """Small completions until ``stop`` (at most 200), so the profile sees model steps."""
    for _ in range(200):
        if stop.is_set():
            return
        try:
            httpx.post(
                base + "/v1/completions", json={"model": model, "prompt": "The capital of France", "max_tokens": 8}, timeout=60
            )
        except httpx.HTTPError:
            time.sleep(0.2)


def test_a_profile_of_the_real_cpu_vllm(cpu_vllm: CpuVllm) -> None:
    base, traces = cpu_vllm.base, cpu_vllm.profile_dir
    port = free_port()
    exporter = Proc(
        exporter_argv(
            "serve", "--listen-address", f"127.0.0.1:{port}", "--gpu-source", "none", "--engine", base + "/metrics",
            "--engine-interval", "2", "--enable-profile", "--profile-dir", str(traces),
        ),
        name="exporter-profile",
    )  # fmt: skip
    stop = threading.Event()
    with engine_priority(cpu_vllm.proc, nice=10), exporter.start():
        ex = f"http://127.0.0.1:{port}"
        exporter.wait_http(ex + "/metrics", 60, ok=lambda r: 'engine="vllm"' in r.text and "llm_engine_info{" in r.text)
        model = httpx.get(base + "/v1/models", timeout=10).json()["data"][0]["id"]
        loader = threading.Thread(target=_load, args=(base, model, stop), daemon=True)
        loader.start()
        try:
            r = httpx.post(ex + "/profile", params={"engine": base.removeprefix("http://"), "seconds": "5"}, timeout=300)
        finally:
            stop.set()
            loader.join(90)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["family"] == "vllm"
        assert body["kernels"] == 0 and body["basis"] == "cpu_ops" and "message" not in body
        assert any(name.endswith(".pt.trace.json.gz") for name in body["trace_files"]), body["trace_files"]
        assert body["trace_bytes"] > 0 and body["other_events"] > 0 and body["cpu_op_seconds"] > 0
        shares = body["shares"]
        assert set(shares) == {"attention", "gemm", "communication", "memory_copy", "sampling", "other"}
        assert math.isclose(sum(shares.values()), 1.0, rel_tol=1e-9)
        assert shares["gemm"] + shares["attention"] > 0 and shares["gemm"] > 0 and shares["attention"] > 0, shares
        assert shares == body["cpu_op_shares"]
        # the split beside the prompt length the engine saw meanwhile (its prompt histogram moved under the load)
        assert body["prompt_tokens_p50"] > 0, body
        assert body["summary"].endswith("-token prompts (of CPU operator time)"), body["summary"]
        engine = body["engine"]

        def published() -> dict[str, float] | None:
            text = httpx.get(ex + "/metrics", timeout=10).text
            got = parse(text, {"llm_operator_time_share"}).samples.get("llm_operator_time_share", [])
            out = {labels["kind"]: value for labels, value in got if labels.get("engine") == engine}
            return out if len(out) == len(shares) else None

        seen = wait_until(published, 30, "llm_operator_time_share published")
        for kind, share in shares.items():  # the answered split is the published one
            assert math.isclose(seen[kind], share, rel_tol=1e-6), (kind, seen[kind], share)
        assert httpx.get(ex + "/profile", params={"engine": body["engine"]}, timeout=10).json() == body
