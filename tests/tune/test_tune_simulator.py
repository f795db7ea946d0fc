"""``tune`` end to end on the simulator: the fault's group is tried first, the accepted change raises capacity at SLO.

The simulator runs in model time, so what bends its curve is its own settings,
not this machine; steps are short (4 s) and concurrencies few, so each test is a
handful of ramps. The fault tests measure each configuration once (``--repeats 1``)
and skip the warm-up (tests/tune/workload.py says why): a second repeat of the
simulator measures the same curve again. The accept rule over noisy repeats is
unit-tested (test_tune_decide.py) and runs end to end with two repeats on the real
engines (test_tune_vllm.py, test_tune_llamacpp.py) and in test_tune_apply.py;
test_healthy_recommends_no_change keeps tune's defaults. Each scenario's SLO is one the baseline misses where the fault
bites and the fixed configuration meets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.simulator.scenarios import SCENARIOS
from exporter.tune.argv import EngineCommand
from exporter.tune.capacity import SLO
from exporter.tune.decide import decide
from exporter.tune.knobs import lookup
from tests.tune.records import report, step
from tests.tune.tune_cli import check_outputs, first_cap, run_tune, sim_command
from tests.tune.workload import workload

pytestmark = [pytest.mark.timeout(900)]


def test_batching_window_first_trial_is_strategy_and_the_shorter_window_wins(tmp_path: Path) -> None:
    doc, err, rc = run_tune(
        tmp_path,
        ["--slo-ttft", "500ms", "--trials", "2", "--repeats", "1", *workload("1,2,4", 64, 32, warmup_seconds=0)],
        sim_command("batching_window"),
    )
    assert rc == 0, err[-3000:]
    check_outputs(tmp_path, doc)
    assert doc["baseline"]["primary"]["cause"] == "batching_window_too_large", err[-3000:]
    first = doc["trials"][0]
    assert first["group"] == "strategy" and first["changes"][0]["flag"] == "--batch-wait-s"
    assert first["accepted"], first["why"]
    assert first_cap(first) > first_cap(doc["baseline"])
    rec = doc["recommendation"]
    assert rec is not None and "--batch-wait-s" in rec["argv"] and rec["changes"][0]["to"] == "0.2"
    assert doc["rollback"]["argv"] == doc["baseline"]["argv"]
    # the baseline is what the tuner left running, and the closing paragraph says what to deploy
    assert doc["left_running"]["argv"] == doc["baseline"]["argv"]
    assert "Deploy: " in err and "Roll back to: " in err


def test_kv_pressure_first_trial_is_resource_and_more_blocks_win(tmp_path: Path) -> None:
    doc, err, rc = run_tune(
        tmp_path,
        ["--slo-ttft", "300ms", "--trials", "1", "--repeats", "1", *workload("1,2,4,8", 64, 128, warmup_seconds=0)],
        sim_command("kv_pressure", "--num-gpu-blocks", "24", "--time-scale", "0.5"),
    )
    assert rc == 0, err[-3000:]
    assert doc["baseline"]["primary"]["cause"] == "kv_cache_pressure", err[-3000:]
    first = doc["trials"][0]
    assert first["group"] == "resource" and first["changes"][0] == {"flag": "--num-gpu-blocks", "from": "24", "to": "48"}
    assert first["accepted"], first["why"]
    assert first_cap(first) > first_cap(doc["baseline"])


def test_healthy_recommends_no_change(tmp_path: Path) -> None:
    doc, err, rc = run_tune(
        tmp_path,
        ["--slo-ttft", "1s", *workload("1,2,4", 64, 32)],
        sim_command("healthy", "--num-gpu-blocks", "20000", "--time-scale", "0.5"),
    )
    assert rc == 0, err[-3000:]
    assert doc["recommendation"] is None and doc["trials"] == []
    assert "SLO holds" in doc["stop"] and "No change recommended" in err
    # the engine was warmed up at the highest concurrency, one step long, before it was measured
    warm = doc["baseline"]["warmup"]
    assert warm["concurrency"] == 4 and warm["requests"] > 0 and warm["errors"] == 0, warm
    assert "warm-up at concurrency 4 for 4 s" in err


@pytest.mark.parametrize(
    ("scenario", "layer", "cause", "change"),
    [
        (
            "eager_decode",
            "operator",
            "cuda_graphs_not_covering_batches",
            {"flag": "--enforce-eager", "from": "true", "to": "false"},
        ),
        (
            "long_prompts_small_chunk",
            "operator",
            "prefill_chunk_too_small",
            {"flag": "--max-num-batched-tokens", "from": "128", "to": "256"},
        ),
        ("healthy", "memory", "context_reserved_not_used", {"flag": "--max-model-len", "from": None, "to": "4096"}),
        # served as llama.cpp (4 slots of 8192 in a 32768-token cache): half the context per slot is twice
        # the slots in the same memory (exporter/simulator/dialects/llamacpp.py), llama.cpp's -np up with -c kept
        (
            "over_reserved_context",
            "memory",
            "context_reserved_not_used",
            {"flag": "--max-model-len", "from": "8192", "to": "4096"},
        ),
    ],
)
def test_each_setting_cause_proposes_the_matching_simulator_setting(
    scenario: str, layer: str, cause: str, change: dict[str, str | None]
) -> None:
    """The knob table's first move for each cause, on the simulator started with the scenario's launch
    flags (the cause as the primary at the knee, as test_sim_setting_causes.py sees it named):
    graphs on, a larger chunk, a shorter maximum length. The end-to-end eager tune is not run here: on
    a loaded 2-core machine the starved simulator thread reads serial_host_ceiling at the knee."""
    dialect = SCENARIOS[scenario].dialect
    argv = [
        "llm-layer-exporter",
        "simulate",
        "--scenario",
        scenario,
        *(["--dialect", dialect] if dialect else []),
        *SCENARIOS[scenario].launch,
    ]
    knee = step(4, 2.0, 2.0, primary=(layer, cause))
    runs = [report([step(1, 1.0, 0.1), step(2, 1.9, 0.2), knee], knee_index=2, cause=(layer, cause))]
    d = decide("simulator", EngineCommand.parse(argv), runs, SLO(ttft_s=0.5), set())
    assert d.cause == cause and d.cmd is not None, d
    assert d.changes[0].as_dict() == change
    assert d.group == lookup("simulator", cause).knob.group


def test_long_prompts_over_a_small_chunk_get_a_larger_budget(tmp_path: Path) -> None:
    """``long_prompts_small_chunk`` (--max-num-batched-tokens 128, 12k-token prompts): the primary at the
    knee is prefill_chunk_too_small and the first trial doubles the per-step budget."""
    doc, err, rc = run_tune(
        tmp_path,
        # one client: a second would queue behind the saturated step budget, which reads as admission
        # holding requests back (kv_fragmentation_or_capacity_misjudged) before the chunk count
        ["--slo-ttft", "300ms", "--trials", "1", "--repeats", "1", *workload("1", 12000, 16, step_seconds=8, warmup_seconds=0)],
        sim_command("long_prompts_small_chunk", *SCENARIOS["long_prompts_small_chunk"].launch),
    )
    assert rc == 0, err[-3000:]
    assert doc["baseline"]["primary"]["cause"] == "prefill_chunk_too_small", err[-3000:]
    first = doc["trials"][0]
    assert first["group"] == "strategy", first
    assert first["changes"][0] == {"flag": "--max-num-batched-tokens", "from": "128", "to": "256"}, first


def test_over_reserved_context_end_to_end_shortens_the_context_and_wins(tmp_path: Path) -> None:
    """``over_reserved_context`` served as llama.cpp (4 slots of 8192 tokens, requests of 320): at the knee
    both the generic misjudgment (requests wait with the cache free) and its reason (context reserved far
    above use) hold; the reason is the primary (``causality.REFINES``), so the first trial halves the
    context per slot (twice the slots in the same memory) instead of adding KV memory, and it wins."""
    doc, err, rc = run_tune(
        tmp_path,
        [
            "--slo-ttft",
            "300ms",
            "--trials",
            "1",
            "--repeats",
            "1",
            *workload("4,8,16", 256, 64, step_seconds=10, warmup_seconds=0),
        ],
        sim_command("over_reserved_context", "--dialect", "llamacpp", *SCENARIOS["over_reserved_context"].launch),
    )
    assert rc == 0, err[-3000:]
    assert doc["baseline"]["primary"]["cause"] == "context_reserved_not_used", err[-3000:]
    first = doc["trials"][0]
    assert (first["group"], first["cause"]) == ("resource", "context_reserved_not_used"), first
    assert first["changes"] == [{"flag": "--max-model-len", "from": "8192", "to": "4096"}], first
    assert first["accepted"], first["why"]
    assert first_cap(first) > first_cap(doc["baseline"])
