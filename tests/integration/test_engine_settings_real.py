"""Launch settings read from the real engines (issue 23's proof): the CPU vLLM and llama-server
as the integration tests start them, scraped by ``EngineSource`` with their PID.

vLLM (the real tier's shared CPU vLLM, ``cpu_vllm`` in tests/conftest.py): ``llm_engine_setting`` carries ``max_num_seqs``, ``max_model_len`` as started (its
command line) and ``block_size`` / ``gpu_memory_utilization`` as it serves them
(``vllm:cache_config_info``); ``--enforce-eager`` shows in ``llm_engine_config_info``.
llama.cpp: ``slots`` and ``context_per_slot`` from its /props agree with ``-np`` / ``-c``.
Set ``LLM_EXPORTER_SKIP_VLLM=1`` / ``LLM_EXPORTER_SKIP_LLAMACPP=1`` to skip.
"""

from __future__ import annotations

import pytest

from exporter.engines.config import EngineConfig
from exporter.engines.source import EngineSource
from exporter.samples import Sample
from tests.integration.integration_helpers import ENGINE_READY_S, CpuVllm, llamacpp_proc, skip_if_off

pytestmark = [pytest.mark.timeout(900)]

START_TIMEOUT_S = ENGINE_READY_S


def _settings(source: EngineSource) -> tuple[dict[str, float], list[dict[str, str]]]:
    result = source.sample()
    numbers = {p.labels["setting"]: p.value for p in result.points if p.name == "llm_engine_setting" and isinstance(p, Sample)}
    infos = [dict(p.labels) for p in result.points if p.name == "llm_engine_config_info"]
    return numbers, infos


def test_cpu_vllm_settings_as_started(cpu_vllm: CpuVllm) -> None:
    cfg = EngineConfig(url=cpu_vllm.metrics_url, name="cpu-vllm", type="vllm", pid=cpu_vllm.proc.pid, timeout=10.0)
    numbers, infos = _settings(EngineSource(cfg))
    assert numbers == {
        "max_num_seqs": 8.0,
        "max_model_len": 256.0,
        "block_size": 32.0,
        "gpu_memory_utilization": 0.3,
        "num_speculative_tokens": 3.0,  # --speculative-config's n-gram drafts (issue 36)
    }
    assert len(infos) == 1 and infos[0]["enforce_eager"] == "true"


def test_llamacpp_settings_from_props_and_command_line() -> None:
    skip_if_off("llamacpp")
    proc, base = llamacpp_proc(["-np", "2", "-c", "512", "-t", "1"], "llamacpp-settings")
    try:
        proc.start()
        proc.wait_http(base + "/health", START_TIMEOUT_S)
        numbers, _ = _settings(EngineSource(EngineConfig(url=base + "/metrics", name="llama", pid=proc.pid, timeout=5.0)))
    finally:
        proc.stop()
    assert numbers == {"slots": 2.0, "context_per_slot": 256.0, "context_size": 512.0}
