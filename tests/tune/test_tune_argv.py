"""Reading and rewriting engine command lines, per engine."""

from __future__ import annotations

import pytest

from exporter.tune.argv import ArgvError, Change, EngineCommand, apply_move, changes_between, identify
from exporter.tune.knobs import TABLES, Move


def _move(engine: str, cause: str, flag: str) -> Move:
    return next(m for m in TABLES[engine][cause].moves if m.flag == flag)


def _applied(cmd: EngineCommand, move: Move) -> tuple[EngineCommand, list[Change]]:
    """``apply_move`` where the move applies (not at a bound)."""
    result = apply_move(cmd, move)
    assert result is not None
    return result


@pytest.mark.parametrize(
    ("argv", "engine"),
    [
        (["vllm", "serve", "m"], "vllm"),
        (["python", "-m", "vllm.entrypoints.openai.api_server"], "vllm"),
        (["python3", "-m", "sglang.launch_server", "--model-path", "m"], "sglang"),
        (["text-generation-launcher", "--model-id", "m"], "tgi"),
        (["trtllm-serve", "m"], "trtllm"),
        (["/opt/llama/llama-server", "-m", "x.gguf"], "llamacpp"),
        (["llm-layer-exporter", "simulate", "--scenario", "kv_pressure"], "simulator"),
        (["python", "-m", "exporter", "simulate"], "simulator"),
        (["./my-server"], None),
    ],
)
def test_identify(argv: list[str], engine: str | None) -> None:
    assert identify(argv) == engine


def test_an_unknown_program_needs_engine_type() -> None:
    with pytest.raises(ArgvError, match="pass --engine-type"):
        EngineCommand.parse(["./my-server", "--port", "1"])
    assert EngineCommand.parse(["./my-server"], "vllm").engine == "vllm"


def test_llamacpp_more_slots_scales_the_context_to_keep_it_per_slot() -> None:
    cmd = EngineCommand.parse(["llama-server", "-m", "t.gguf", "--parallel", "2", "--ctx-size", "1024", "--port", "9"])
    new, changes = _applied(cmd, _move("llamacpp", "kv_fragmentation_or_capacity_misjudged", "-np"))
    assert new.get("-np") == "8" and new.get("-c") == "4096"
    assert [c.as_dict() for c in changes] == [
        {"flag": "-np", "from": "2", "to": "8"},
        {"flag": "-c", "from": "1024", "to": "4096"},
    ]
    assert new.argv[:5] == ["llama-server", "-m", "t.gguf", "--parallel", "8"]  # rewritten in place, spelling kept
    assert new.url() == "http://127.0.0.1:9" and cmd.get("-np") == "2"  # the original is untouched


def test_vllm_moves_set_add_and_drop_flags_and_environment() -> None:
    cmd = EngineCommand.parse(
        ["VLLM_CPU_KVCACHE_SPACE=2", "vllm", "serve", "m", "--max-num-seqs=8", "--enforce-eager", "--host", "0.0.0.0"]
    )
    assert cmd.env == {"VLLM_CPU_KVCACHE_SPACE": "2"} and cmd.url() == "http://127.0.0.1:8000"
    more, _ = _applied(cmd, _move("vllm", "kv_fragmentation_or_capacity_misjudged", "--max-num-seqs"))
    assert "--max-num-seqs=16" in more.argv
    kv, ch = _applied(cmd, _move("vllm", "kv_cache_pressure", "VLLM_CPU_KVCACHE_SPACE"))
    assert kv.full()[:2] == ["env", "VLLM_CPU_KVCACHE_SPACE=4"] and ch[0].as_dict()["to"] == "4"
    graphs, _ = _applied(cmd, _move("vllm", "launch_bound_small_kernels", "--enforce-eager"))
    assert "--enforce-eager" not in graphs.argv and graphs.argv[-2:] == ["--host", "0.0.0.0"]
    util, _ = _applied(cmd, _move("vllm", "kv_cache_pressure", "--gpu-memory-utilization"))
    assert util.get("--gpu-memory-utilization") == "0.95"  # absent: the default 0.9 plus 0.05
    assert apply_move(util, _move("vllm", "kv_cache_pressure", "--gpu-memory-utilization")) is None  # at its bound
    assert [c.flag for c in changes_between(cmd, util)] == ["--gpu-memory-utilization"]


def test_other_engines_flags() -> None:
    sg = EngineCommand.parse(["python", "-m", "sglang.launch_server", "--max-running-requests", "16"])
    assert sg.url() == "http://127.0.0.1:30000"
    new, _ = _applied(sg, _move("sglang", "kv_cache_pressure", "--max-running-requests"))
    assert new.get("--max-running-requests") == "8"
    tgi = EngineCommand.parse(["text-generation-launcher", "--hostname", "10.0.0.2", "--port", "80"])
    assert tgi.url() == "http://10.0.0.2:80"
    new, _ = _applied(tgi, _move("tgi", "batching_window_too_large", "--max-waiting-tokens"))
    assert new.get("--max-waiting-tokens") == "10"
    trt = EngineCommand.parse(["trtllm-serve", "m", "--max_batch_size", "8"])
    new, _ = _applied(trt, _move("trtllm", "kv_fragmentation_or_capacity_misjudged", "--max_batch_size"))
    assert new.get("--max_batch_size") == "16"


def test_simulator_flags_are_its_settings() -> None:
    cmd = EngineCommand.parse(
        ["llm-layer-exporter", "simulate", "--scenario", "batching_window", "--listen-address", "127.0.0.1:7"]
    )
    assert cmd.url() == "http://127.0.0.1:7"
    # absent: the scenario's value (batching_window holds requests 0.8 s)
    new, ch = _applied(cmd, _move("simulator", "batching_window_too_large", "--batch-wait-s"))
    assert new.get("--batch-wait-s") == "0.2" and ch[0].old is None
    cmd.set("--batch-wait-s", "0.4")
    new, _ = _applied(cmd, _move("simulator", "batching_window_too_large", "--batch-wait-s"))
    assert new.get("--batch-wait-s") == "0.1"
    blocks, _ = _applied(cmd, _move("simulator", "kv_cache_pressure", "--num-gpu-blocks"))
    assert blocks.get("--num-gpu-blocks") == "8192"
