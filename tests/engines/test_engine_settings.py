"""Launch settings read from the engine (exporter/engines/settings.py), from real command lines and captures.

* vLLM: the argv ``tests/integration/integration_helpers.py`` starts the CPU vLLM with
  (``SMALL_KV_VLLM_ARGS``), and its served ``vllm:cache_config_info`` (the real AIBrix capture).
* llama.cpp: ``llamacpp-b11434-props.json`` is the /props body a real llama-server b11434
  returned here for ``-np 2 -c 512`` (tests/engines/fixtures/), and that same command line.
* SGLang, TGI, trtllm-serve: command lines written from their documented flags
  (SGLang docs/backend/server_arguments.md and its launch examples, TGI
  docs/source/reference/launcher.md, TensorRT-LLM docs "trtllm-serve" examples), and
  info-route bodies written from their documented fields (SGLang ``/get_server_info``:
  the ServerArgs field names of server_args.py; TGI ``/info``: router/src/lib.rs ``Info``).
* /proc: a real child process whose command line and environment are read back;
  only the named variables leave the environment (a secret beside them does not).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import cast

import pytest

from exporter.engines import settings
from exporter.engines.config import EngineConfig
from exporter.engines.source import EngineSource
from exporter.samples import Sample
from exporter.schema import ENGINE_SETTINGS, SPECS
from tests.integration.integration_helpers import SMALL_KV_VLLM_ARGS, shared_vllm_args

FIXTURES = Path(__file__).parent / "fixtures"
#: the real tier's shared CPU vLLM as vllm_proc() starts it (interpreter and model paths are the cache's)
VLLM_ARGV = [
    "/var/cache/llm-layer-exporter/vllm-venv/bin/python",
    "-m",
    "vllm.entrypoints.openai.api_server",
    "--model",
    "/var/cache/llm-layer-exporter/tiny-model",
    "--host",
    "127.0.0.1",
    "--port",
    "8000",
    *shared_vllm_args(Path("/tmp/vllm-profiles")),
]
LLAMACPP_ARGV = ["llama-server", "-m", "tiny-llama.gguf", "--host", "127.0.0.1", "--port", "8080", "--metrics"]
LLAMACPP_ARGV += ["--no-webui", "-np", "2", "-c", "512", "-t", "1"]


def _spelling(family: str, setting: str) -> str | None:
    """The first spelling of the flag that sets ``setting`` on ``family`` (what ``tune`` writes), or None."""
    for flag in settings.FLAGS.get(family, ()):
        if flag.setting == setting and flag.kind in ("number", "text", "list_max"):
            return flag.spellings[0]
    return None


def test_vllm_argv_as_the_integration_tests_start_it() -> None:
    got = settings.from_argv("vllm", VLLM_ARGV)
    assert got.numbers == {
        "max_model_len": 256.0,
        "block_size": 32.0,
        "max_num_seqs": 8.0,
        "gpu_memory_utilization": 0.3,
        "num_speculative_tokens": 3.0,  # --speculative-config's n-gram drafts
    }
    assert got.texts == {"enforce_eager": "true"}


def test_vllm_spellings_last_flag_wins_and_compilation_config() -> None:
    argv = ["vllm", "serve", "m", "--max_num_seqs=64", "--max-num-batched-tokens", "2048", "-O3", "--max-num-seqs", "128"]
    argv += ["--enforce-eager", "--no-enforce-eager", "--no-enable-chunked-prefill", "--attention-backend", "FLASHINFER"]
    argv += ["--compilation-config", '{"cudagraph_capture_sizes": [1, 2, 4, 8, 16]}', "-tp", "2"]
    got = settings.from_argv("vllm", argv)
    assert got.numbers == {
        "max_num_seqs": 128.0,
        "max_num_batched_tokens": 2048.0,
        "cuda_graph_max_batch_size": 16.0,
        "tensor_parallel_size": 2.0,
    }
    assert got.texts == {
        "compile_level": "3",
        "enforce_eager": "false",
        "chunked_prefill": "false",
        "attention_backend": "FLASHINFER",
    }
    sizes = settings.from_argv("vllm", ["vllm", "serve", "m", "--cudagraph-capture-sizes", "1", "2", "4", "--port", "1"])
    assert sizes.numbers == {"cuda_graph_max_batch_size": 4.0}


def test_vllm_served_cache_config_info_real_capture() -> None:
    text = (FIXTURES / "real-vllm-v0-aibrix-runtime-docs-truncated.prom").read_text()
    got = settings.from_exposition("vllm", text)
    assert got.numbers == {"block_size": 16.0, "gpu_memory_utilization": 0.9}
    assert got.texts == {"kv_cache_dtype": "auto"}


def test_sglang_served_gauges_and_documented_command_line() -> None:
    text = (FIXTURES / "sglang-0.5.23-colon-2dp.prom").read_text()
    assert settings.from_exposition("sglang", text).numbers["block_size"] == 64.0
    argv = ["python", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "8", "--cuda-graph-max-bs=8"]
    argv += ["--chunked-prefill-size=131072", "--kv-cache-dtype", "fp8_e4m3", "--attention-backend", "aiter"]
    argv += ["--mem-fraction-static=0.8", "--max-running-requests", "256", "--disable-cuda-graph"]
    got = settings.from_argv("sglang", argv)
    assert got.numbers == {
        "tensor_parallel_size": 8.0,
        "cuda_graph_max_batch_size": 8.0,
        "max_num_batched_tokens": 131072.0,
        "gpu_memory_utilization": 0.8,
        "max_num_seqs": 256.0,
    }
    assert got.texts == {"kv_cache_dtype": "fp8_e4m3", "attention_backend": "aiter", "enforce_eager": "true"}


def test_tgi_flags_and_environment() -> None:
    argv = ["text-generation-launcher", "--model-id", "m", "--max-batch-prefill-tokens", "4096", "--max-total-tokens", "8192"]
    argv += ["--max-input-tokens", "4000", "--cuda-graphs", "1,2,4,8,16,32", "--num-shard", "2"]
    got = settings.from_argv("tgi", argv)
    assert got.numbers == {
        "max_num_batched_tokens": 4096.0,
        "max_model_len": 8192.0,
        "max_input_tokens": 4000.0,
        "cuda_graph_max_batch_size": 32.0,
        "tensor_parallel_size": 2.0,
    }
    assert got.texts == {}
    env = settings.from_environ("tgi", {"CUDA_GRAPHS": "0", "ATTENTION": "flashdecoding", "MAX_BATCH_SIZE": "32"})
    assert env.numbers == {"max_num_seqs": 32.0} and env.texts == {"enforce_eager": "true", "attention_backend": "flashdecoding"}


def test_trtllm_serve_underscore_flags() -> None:
    argv = ["trtllm-serve", "serve", "m", "--backend", "pytorch", "--tp_size", "8", "--max_batch_size", "161"]
    argv += ["--max_num_tokens", "1160", "--max_seq_len", "49152", "--kv_cache_free_gpu_memory_fraction", "0.8"]
    assert settings.from_argv("trtllm", argv).numbers == {
        "tensor_parallel_size": 8.0,
        "max_num_seqs": 161.0,
        "max_num_batched_tokens": 1160.0,
        "max_model_len": 49152.0,
        "gpu_memory_utilization": 0.8,
    }


def test_llamacpp_props_capture_agrees_with_its_command_line() -> None:
    props = json.loads((FIXTURES / "llamacpp-b11434-props.json").read_text())
    served = settings.from_llamacpp_props(props)
    assert served.numbers == {"slots": 2.0, "context_per_slot": 256.0}
    argv = settings.from_argv("llamacpp", LLAMACPP_ARGV)
    assert argv.numbers == {"slots": 2.0, "context_size": 512.0, "context_per_slot": 256.0}
    fa = settings.from_argv("llamacpp", [*LLAMACPP_ARGV, "-fa", "on"])
    assert fa.texts == {"attention_backend": "flash_attn"}


@pytest.mark.parametrize(
    "argv",
    [
        ["vllm", "--max-num-seqs"],  # value missing at the end
        ["vllm", "--max-num-seqs", "many", "--max-model-len", "-5", "--block-size", "nan"],
        ["vllm", "--attention-backend", "x" * 200, "--kv-cache-dtype", "a b;rm"],
        ["vllm", "--compilation-config", "{not json", "--cudagraph-capture-sizes", "x", "y"],
    ],
)
def test_bad_values_stay_unknown(argv: list[str]) -> None:
    got = settings.from_argv("vllm", argv)
    assert got.numbers == {} and got.texts == {}


def test_unknown_family_and_empty_input_give_nothing() -> None:
    assert settings.from_argv("nosuch", ["--max-num-seqs", "4"]).numbers == {}
    assert settings.from_exposition("vllm", "") == settings.EngineSettings()
    assert settings.from_llamacpp_props({"total_slots": True}) == settings.EngineSettings()


def test_vocabulary_is_the_schema_s_and_every_flag_names_a_known_setting() -> None:
    assert tuple(settings.NUMBER_SETTINGS) == ENGINE_SETTINGS
    assert SPECS["llm_engine_setting"].closed_values("setting") == ENGINE_SETTINGS
    for family, flags in settings.FLAGS.items():
        for flag in flags:
            assert flag.setting in settings.NUMBER_SETTINGS or flag.setting in settings.TEXT_SETTINGS, (family, flag)
    for label in ("enforce_eager", "chunked_prefill", "compile_level", "attention_backend", "kv_cache_dtype"):
        assert label in SPECS["llm_engine_config_info"].labels
    assert _spelling("vllm", "max_num_batched_tokens") == "--max-num-batched-tokens"
    assert _spelling("sglang", "max_num_batched_tokens") == "--chunked-prefill-size"
    assert _spelling("vllm", "enforce_eager") is None  # a switch, not a value to write
    assert settings.aliases("llamacpp")["-np"] == ("--parallel",)
    assert settings.aliases("vllm")["--max-num-seqs"] == ("--max_num_seqs",)
    assert settings.aliases("vllm")["-tp"] == ("--tensor-parallel-size", "--tensor_parallel_size")


@pytest.mark.parametrize(
    ("family", "argv", "layout"),
    [
        # vLLM engine_args: -tp/-pp/-dp and their long spellings (underscores too, FlexibleArgumentParser)
        ("vllm", ["vllm", "serve", "m", "-tp", "4", "-pp", "2", "-dp", "2"], (4.0, 2.0, 2.0)),
        ("vllm", ["vllm", "serve", "m", "--pipeline-parallel-size=2", "--data_parallel_size", "4"], (None, 2.0, 4.0)),
        # SGLang server_args: --tp-size / --pp-size / --dp-size, the documented --tp / --dp, the long names
        ("sglang", ["python", "-m", "sglang.launch_server", "--tp", "2", "--pp-size", "2", "--dp", "4"], (2.0, 2.0, 4.0)),
        ("sglang", ["python", "-m", "sglang.launch_server", "--data-parallel-size=2", "--dp-size", "8"], (None, None, 8.0)),
        # trtllm-serve (click, underscores): --tp_size / --pp_size; no data-parallel flag
        ("trtllm", ["trtllm-serve", "serve", "m", "--tp_size", "4", "--pp_size", "2"], (4.0, 2.0, None)),
        # TGI shards one model only (--num-shard); llama.cpp has none of the three
        ("tgi", ["text-generation-launcher", "--num-shard", "2"], (2.0, None, None)),
        ("llamacpp", ["llama-server", "-m", "x.gguf", "-np", "2"], (None, None, None)),
    ],
)
def test_the_parallel_layout_flags_per_engine(family: str, argv: list[str], layout: tuple[float | None, ...]) -> None:
    got = settings.from_argv(family, argv).numbers
    names = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
    assert tuple(got.get(n) for n in names) == layout
    points = settings.setting_points(settings.from_argv(family, argv), {"server": "a"})
    assert {p.labels["setting"] for p in points} >= {n for n, v in zip(names, layout) if v is not None}


def test_sglang_server_info_publishes_its_layout() -> None:
    got = settings.from_info("sglang", {**SGLANG_INFO, "pp_size": 2, "dp_size": 4})
    assert (got.numbers["tensor_parallel_size"], got.numbers["pipeline_parallel_size"], got.numbers["data_parallel_size"]) == (
        2.0,
        2.0,
        4.0,
    )
    assert _spelling("vllm", "pipeline_parallel_size") == "--pipeline-parallel-size"
    assert _spelling("sglang", "data_parallel_size") == "--dp-size"
    assert settings.aliases("vllm")["-dp"] == ("--data-parallel-size", "--data_parallel_size")


def _sleeper(argv_tail: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A real process with ``argv_tail`` on its command line, returned once it has exec'd (bounded wait)."""
    code = "import time; time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code, *argv_tail], env={"PATH": os.environ.get("PATH", ""), **env})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and code.encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
        time.sleep(0.02)
    return proc


def test_read_process_reads_cmdline_and_only_the_named_environment() -> None:
    proc = _sleeper(
        ["--max-num-seqs", "4", "--enforce-eager"], {"VLLM_ATTENTION_BACKEND": "TORCH_SDPA", "HF_TOKEN": "hf_secret123"}
    )
    try:
        got = settings.read_process(proc.pid, "vllm")
    finally:
        proc.kill()
        proc.wait(10)
    assert got.numbers == {"max_num_seqs": 4.0}
    assert got.texts == {"enforce_eager": "true", "attention_backend": "TORCH_SDPA"}
    assert "hf_secret123" not in repr(got)
    assert settings.read_process(proc.pid, "vllm") == settings.EngineSettings()  # gone: nothing, no error


class _Handler(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


def test_engine_source_publishes_served_and_command_line_settings() -> None:
    """A real HTTP vLLM exposition plus the PID of a real process: served values win, the argv fills in."""
    text = (FIXTURES / "real-vllm-v0-aibrix-runtime-docs-truncated.prom").read_text()
    handler = type("H", (_Handler,), {"body": text.encode()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    proc = _sleeper([*SMALL_KV_VLLM_ARGS, "--gpu-memory-utilization", "0.5"], {})
    try:
        cfg = EngineConfig(url=f"http://127.0.0.1:{server.server_address[1]}/metrics", name="v", type="vllm", pid=proc.pid)
        result = EngineSource(cfg).sample()
    finally:
        proc.kill()
        proc.wait(10)
        server.shutdown()
        server.server_close()
    got = {p.labels["setting"]: p.value for p in result.points if p.name == "llm_engine_setting" and isinstance(p, Sample)}
    # block_size and gpu_memory_utilization as served (16, 0.9), not the argv's (32, 0.5)
    assert got == {"block_size": 16.0, "gpu_memory_utilization": 0.9, "max_model_len": 256.0, "max_num_seqs": 8.0}
    setting = next(p for p in result.points if p.name == "llm_engine_setting")
    assert setting.labels["server"] == "v" and setting.labels["engine"] == "vllm"
    info = [p for p in result.points if p.name == "llm_engine_config_info"]
    assert len(info) == 1 and info[0].labels["enforce_eager"] == "true"
    assert info[0].labels["kv_cache_dtype"] == "auto"  # the engine's own label kept
    assert all(set(p.labels) <= set(SPECS[p.name].labels) for p in result.points if p.name in SPECS)


def test_engine_source_without_pid_publishes_only_served_settings() -> None:
    text = (FIXTURES / "real-vllm-v0-aibrix-runtime-docs-truncated.prom").read_text()
    handler = type("H", (_Handler,), {"body": text.encode()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cfg = EngineConfig(url=f"http://127.0.0.1:{server.server_address[1]}/metrics", name="v", type="vllm")
        result = EngineSource(cfg).sample()
    finally:
        server.shutdown()
        server.server_close()
    got = {p.labels["setting"] for p in result.points if p.name == "llm_engine_setting"}
    assert got == {"block_size", "gpu_memory_utilization"}  # max_num_seqs unknown: absent


#: SGLang /get_server_info: ServerArgs by field name (a derived default is null), trimmed
SGLANG_INFO = {
    "model_path": "m",
    "tp_size": 2,
    "max_running_requests": None,
    "chunked_prefill_size": 8192,
    "context_length": None,
    "mem_fraction_static": 0.88,
    "page_size": 1,
    "cuda_graph_max_bs": 160,
    "disable_cuda_graph": False,
    "attention_backend": "fa3",
    "kv_cache_dtype": "auto",
    "version": "0.5.23",
}
#: TGI /info (router Info), trimmed
TGI_INFO = {
    "model_id": "m",
    "max_concurrent_requests": 128,
    "max_input_tokens": 4095,
    "max_total_tokens": 4096,
    "version": "3.3.6",
}


def test_info_routes_documented_fields() -> None:
    got = settings.from_info("sglang", SGLANG_INFO)
    assert got.numbers == {
        "max_num_batched_tokens": 8192.0,
        "gpu_memory_utilization": 0.88,
        "block_size": 1.0,
        "tensor_parallel_size": 2.0,
        "cuda_graph_max_batch_size": 160.0,
    }
    assert got.texts == {"enforce_eager": "false", "attention_backend": "fa3", "kv_cache_dtype": "auto"}
    assert settings.from_info("tgi", TGI_INFO).numbers == {"max_model_len": 4096.0, "max_input_tokens": 4095.0}
    assert settings.from_info("tgi", ["not", "an", "object"]) == settings.EngineSettings()
    assert settings.from_info("vllm", TGI_INFO) == settings.EngineSettings()  # no info route read


class _Routes(BaseHTTPRequestHandler):
    routes: dict[str, bytes] = {}
    hits: list[str] = []

    def do_GET(self) -> None:
        self.hits.append(self.path)
        body = self.routes.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


def test_engine_source_reads_tgi_info_once_a_minute() -> None:
    text = (FIXTURES / "tgi-3.x-failures.prom").read_bytes()
    handler = cast(
        type[_Routes], type("H", (_Routes,), {"routes": {"/metrics": text, "/info": json.dumps(TGI_INFO).encode()}, "hits": []})
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        source = EngineSource(EngineConfig(url=f"http://127.0.0.1:{server.server_address[1]}/metrics", name="t", type="tgi"))
        first, second = source.sample(), source.sample()
    finally:
        server.shutdown()
        server.server_close()
    for result in (first, second):
        got = {p.labels["setting"]: p.value for p in result.points if p.name == "llm_engine_setting" and isinstance(p, Sample)}
        assert got == {"max_model_len": 4096.0, "max_input_tokens": 4095.0}
        assert not result.partial_errors
    assert handler.hits.count("/info") == 1 and handler.hits.count("/metrics") == 2


def test_engine_source_without_an_info_route_still_scrapes() -> None:
    """TGI's Prometheus port has no /info: 404, nothing published from it, the scrape is fine."""
    text = (FIXTURES / "tgi-3.x-failures.prom").read_bytes()
    handler = type("H", (_Routes,), {"routes": {"/metrics": text}, "hits": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = EngineSource(EngineConfig(url=f"http://127.0.0.1:{server.server_address[1]}/metrics", name="t")).sample()
    finally:
        server.shutdown()
        server.server_close()
    assert not [p for p in result.points if p.name == "llm_engine_setting"] and not result.partial_errors
    assert any(p.name == "llm_scheduler_requests_waiting" for p in result.points)
