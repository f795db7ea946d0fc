"""Tune moves for the layout and for the GPU-bound causes (issue 33, item 3), on ramp records built here.

Per engine and cause: ``communication_bound`` trades tensor-parallel ranks for data-parallel replicas (or
pipeline stages) inside the same GPUs, ``kv_cache_pressure`` with GPUs to spare adds ranks, ``gpu_imbalance``
turns on the engine's balancing where it has one, ``memory_bandwidth_bound`` goes batch -> FP8 KV cache ->
a longer draft (only where the measured acceptance pays), ``compute_bound`` serves the quantised build named.
No candidate occupies more GPUs than the baseline's, or ``--gpus``; every move says its trade; every stop
still says the entry's sentence (tests/tune/test_tune_knobs.py keeps it from contradicting the advice).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from exporter.cli import main
from exporter.commands import tune as tune_command
from exporter.diagnosis.rules import RULES
from exporter.tune import record, report
from exporter.tune.argv import EngineCommand, changes_between
from exporter.tune.capacity import SLO
from exporter.tune.decide import Decision, decide
from exporter.tune.knobs import ENGINES, HARDWARE_STOP, LAYOUT, QUANTISED, TABLES, Knob
from exporter.tune.layout import Deployment, gpus_of
from exporter.tune.session import Measurement, Trial, TuneResult
from tests.tune.records import report as ramp_report
from tests.tune.records import step

SLO_TTFT = SLO(ttft_s=0.5)
COMM = ("parallel", "communication_bound")
KV = ("memory", "kv_cache_pressure")
BANDWIDTH = ("hardware", "memory_bandwidth_bound")
COMPUTE = ("hardware", "compute_bound")
IMBALANCE = ("parallel", "gpu_imbalance")
SIM = ["llm-layer-exporter", "simulate", "--scenario", "healthy"]
ADVICE_COMM = TABLES["vllm"]["communication_bound"].advice.rstrip(".")


def _gauged(s: dict[str, Any], running: float | None = None, kv: float | None = None, drafted: float = 0.0) -> dict[str, Any]:
    gauges = s["exporter"]["gauges"]
    if running is not None:
        gauges["requests_running"] = {"mean": running, "max": running}
    if kv is not None:
        gauges["kv_cache_usage_ratio"] = {"mean": kv, "max": kv}
    if drafted:
        s["exporter"]["counters"].update(spec_decode_draft_tokens=drafted)
    return s


def _ramp(cause: tuple[str, str], running: float | None = None, kv: float | None = None) -> dict[str, Any]:
    knee = _gauged(step(4, 2.0, 2.0, primary=cause), running, kv)
    return ramp_report([step(1, 1.0, 0.1), knee], knee_index=1, cause=cause)


def _spec_ramp(cause: tuple[str, str], alpha: float, k: int, drafted: float = 2000.0) -> dict[str, Any]:
    """A knee naming ``cause`` that counted ``drafted`` draft tokens accepted as a per-token ``alpha`` gives over ``k``."""
    knee = _gauged(step(4, 2.0, 2.0, primary=cause), drafted=drafted)
    knee["exporter"]["counters"]["spec_decode_accepted_tokens"] = drafted * sum(alpha**i for i in range(1, k + 1)) / k
    return ramp_report([step(1, 1.0, 0.1), knee], knee_index=1, cause=cause)


def _decide(
    engine: str,
    argv: list[str],
    runs: list[dict[str, Any]],
    tried: set[str] | None = None,
    deployment: Deployment | None = None,
) -> Decision:
    return decide(engine, EngineCommand.parse(argv, engine), runs, SLO_TTFT, tried or set(), deployment)


def _changes(d: Decision) -> list[tuple[str, str | None]]:
    return [(c.flag, c.new) for c in d.changes]


# ---------------------------------------------------------------------- communication_bound


def test_vllm_tp4_waiting_on_its_link_halves_tp_and_doubles_the_replicas_inside_its_four_gpus() -> None:
    base = ["vllm", "serve", "m", "--tensor-parallel-size", "4"]
    d = _decide("vllm", base, [_ramp(COMM)])
    assert (d.group, d.stage, d.cause) == ("resource", 1, "communication_bound")
    assert _changes(d) == [("--tensor-parallel-size", "2"), ("--data-parallel-size", "2")]
    assert d.cmd is not None and gpus_of(d.cmd) == 4
    assert "throughput per GPU up" in d.trade and "latency per user up" in d.trade
    # accepted and still waiting on the link: the next halving from the new best, TP 1 x DP 4
    nxt = decide("vllm", d.cmd, [_ramp(COMM)], SLO_TTFT, {d.key}, Deployment.of(EngineCommand.parse(base)))
    assert _changes(nxt) == [("--tensor-parallel-size", "1"), ("--data-parallel-size", "4")]
    # at TP 1 no fewer ranks: the stop quotes the diagnosis's advice and says why
    assert nxt.cmd is not None
    last = decide("vllm", nxt.cmd, [_ramp(COMM)], SLO_TTFT, {nxt.key}, Deployment(gpus=4))
    assert last.cmd is None and last.stop is not None
    assert last.stop.startswith("parallel/communication_bound: the tuner has no automatic move for this cause on vllm (")
    assert "--tensor-parallel-size 1: no fewer ranks" in last.stop and last.stop.endswith(ADVICE_COMM)


def test_short_spellings_are_read_and_rewritten_as_written() -> None:
    d = _decide("vllm", ["vllm", "serve", "m", "-tp", "4", "-dp", "1"], [_ramp(COMM)])
    assert d.cmd is not None and d.cmd.argv[-4:] == ["-tp", "2", "-dp", "2"]


def test_a_full_kv_cache_or_a_rejected_dp_move_gives_pipeline_stages_instead() -> None:
    base = ["vllm", "serve", "m", "--tensor-parallel-size", "4"]
    full = _decide("vllm", base, [_ramp(COMM, kv=0.97)])
    assert _changes(full) == [("--tensor-parallel-size", "2"), ("--pipeline-parallel-size", "2")]
    assert "pipeline hop" in full.trade
    dp = _decide("vllm", base, [_ramp(COMM)])
    after_rejection = _decide("vllm", base, [_ramp(COMM)], tried={dp.key})
    assert _changes(after_rejection) == [("--tensor-parallel-size", "2"), ("--pipeline-parallel-size", "2")]


def test_sglang_replicas_and_its_dp_attention() -> None:
    sg = ["python", "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "4"]
    d = _decide("sglang", sg, [_ramp(COMM)])
    assert _changes(d) == [("--tp-size", "2"), ("--dp-size", "2")] and d.cmd is not None and gpus_of(d.cmd) == 4
    # DP attention's ranks share the TP GPUs: no replicas to add, the pipeline instead
    dpa = _decide("sglang", [*sg, "--dp-size", "4", "--enable-dp-attention"], [_ramp(COMM)])
    assert _changes(dpa) == [("--tp-size", "2"), ("--pp-size", "2")]


def test_trtllm_has_pipeline_stages_and_tgi_has_no_layout_move() -> None:
    d = _decide("trtllm", ["trtllm-serve", "m", "--tp_size", "4"], [_ramp(COMM)])
    assert _changes(d) == [("--tp_size", "2"), ("--pp_size", "2")]
    tgi = _decide("tgi", ["text-generation-launcher", "--model-id", "m", "--num-shard", "4"], [_ramp(COMM)])
    assert tgi.cmd is None and tgi.stop is not None and tgi.stop.endswith(ADVICE_COMM)
    assert "no automatic move for this cause on tgi" in tgi.stop and "--num-shard" in tgi.reason


def test_llamacpp_splits_whole_layers_instead_of_rows() -> None:
    d = _decide("llamacpp", ["llama-server", "-m", "m.gguf", "-sm", "row"], [_ramp(COMM)])
    assert _changes(d) == [("--split-mode", "layer")] and "whole layers" in d.trade
    assert d.cmd is not None and d.cmd.argv[-2:] == ["-sm", "layer"]  # rewritten as written
    bare = _decide("llamacpp", ["llama-server", "-m", "m.gguf"], [_ramp(COMM)])
    assert bare.cmd is None and bare.stop is not None and bare.stop.endswith(ADVICE_COMM)


def test_the_simulator_moves_its_layout_and_refuses_what_it_would_refuse() -> None:
    d = _decide("simulator", [*SIM, "-tp", "4", "--interconnect", "pcie"], [_ramp(COMM)])
    assert _changes(d) == [("--tensor-parallel-size", "2"), ("--data-parallel-size", "2")]
    assert d.cmd is not None and "-tp" in d.cmd.argv and gpus_of(d.cmd) == 4
    # a 140B model on one GPU: 267 GiB of weights do not fit its framebuffer; two pipeline stages hold half each
    big = _decide("simulator", [*SIM, "--params-b", "140", "-tp", "2"], [_ramp(COMM)])
    assert _changes(big) == [("--tensor-parallel-size", "1"), ("--pipeline-parallel-size", "2")]
    # neither fits: the stop says why
    huge = _decide("simulator", [*SIM, "--params-b", "300", "-tp", "2"], [_ramp(COMM)])
    assert huge.cmd is None and huge.stop is not None and "do not fit its" in huge.stop


# ---------------------------------------------------------------------- the GPU budget


def _walk(engine: str, argv: list[str], runs: list[dict[str, Any]], deployment: Deployment | None) -> list[Decision]:
    """Every candidate the decision proposes from ``argv``, each rejected in turn, until it stops."""
    tried: set[str] = set()
    out: list[Decision] = []
    for _ in range(40):
        d = _decide(engine, argv, runs, tried, deployment)
        if d.cmd is None:
            return out
        out.append(d)
        tried.add(d.key)
    raise AssertionError(f"{engine}: no stop after 40 candidates")


LAYOUTS = {
    "vllm": [
        "vllm",
        "serve",
        "m",
        "-tp",
        "2",
        "--max-num-seqs",
        "8",
        "--max-model-len",
        "4096",
        "--num-gpu-blocks-override",
        "64",
    ],
    "sglang": ["python", "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "2", "--max-running-requests", "8"],
    "tgi": ["text-generation-launcher", "--model-id", "m", "--num-shard", "2", "--max-batch-total-tokens", "4096"],
    "trtllm": ["trtllm-serve", "m", "--tp_size", "2"],
    "llamacpp": ["llama-server", "-m", "m.gguf", "-np", "2", "-c", "2048"],
    "simulator": [*SIM, "-tp", "2"],
}


@pytest.mark.parametrize("engine", ENGINES)
def test_no_candidate_ever_occupies_more_gpus_than_the_baseline_without_gpus(engine: str) -> None:
    """Every cause, every move in turn (the records fill the slots with the KV cache a fifth full, so every
    condition holds): the GPUs of each candidate stay within the baseline's, and within --gpus where given."""
    base = EngineCommand.parse(LAYOUTS[engine], engine)
    own = gpus_of(base)
    for rule in RULES:
        runs = [_ramp((rule.layer, rule.cause), running=8, kv=0.2)]
        for d in _walk(engine, LAYOUTS[engine], runs, None):
            assert d.cmd is not None and (own is None or (gpus_of(d.cmd) or 0) <= own), (engine, rule.cause, d.changes)
        for d in _walk(engine, LAYOUTS[engine], runs, Deployment.of(base, 4)):
            assert d.cmd is not None and (gpus_of(d.cmd) or 0) <= 4, (engine, rule.cause, d.changes)


def test_kv_pressure_with_gpus_to_spare_adds_tensor_parallel_ranks() -> None:
    base = ["vllm", "serve", "m", "--gpu-memory-utilization", "0.95", "--kv-cache-dtype", "fp8"]
    cmd = EngineCommand.parse(base)
    blocked = _decide("vllm", base, [_ramp(KV)])  # the baseline's one GPU: the next move, not more GPUs
    assert _changes(blocked) == [("--max-num-seqs", "128")]
    d = _decide("vllm", base, [_ramp(KV)], deployment=Deployment.of(cmd, 2))
    assert _changes(d) == [("--tensor-parallel-size", "2")] and d.cmd is not None and gpus_of(d.cmd) == 2
    assert "more KV cache per replica" in d.trade and "throughput per GPU down" in d.trade
    # at two GPUs of two, no more ranks: the table's next move
    nxt = decide("vllm", d.cmd, [_ramp(KV)], SLO_TTFT, {d.key}, Deployment.of(cmd, 2))
    assert _changes(nxt) == [("--max-num-seqs", "128")]
    # requests waiting with the KV cache free (the simulator): more ranks come last, after the table's own moves
    frag = ("memory", "kv_fragmentation_or_capacity_misjudged")
    walked = _walk("simulator", [*SIM, "--max-num-seqs", "8"], [_ramp(frag, running=8, kv=0.1)], Deployment(gpus=2))
    assert [c.flag for c in walked[-1].changes] == ["--tensor-parallel-size"] and walked[-1].trade == d.trade
    alone = _walk("simulator", [*SIM, "--max-num-seqs", "8"], [_ramp(frag, running=8, kv=0.1)], None)
    assert all(c.flag != "--tensor-parallel-size" for x in alone for c in x.changes)


def test_tgi_without_num_shard_is_not_given_more_shards() -> None:
    """Absent, TGI shards over every visible GPU: a count not on the command line is not raised."""
    d = _walk("tgi", ["text-generation-launcher", "--model-id", "m"], [_ramp(KV)], Deployment(gpus=8))
    assert all(c.flag != "--num-shard" for x in d for c in x.changes)


def test_a_budget_below_the_baseline_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "--slo-ttft", "1s", "--gpus", "2", "--", "vllm", "serve", "m", "-tp", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--gpus 2: the baseline already occupies 4 GPUs" in err and len(err.splitlines()) == 1


def test_the_tune_options_reach_the_settings() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    tune_command.add_arguments(parser)
    args = parser.parse_args(["--slo-ttft", "1s", "--gpus", "8", "--quantized-model", "m-fp8", "--", "vllm", "serve", "m"])
    settings, cmd = tune_command.settings_from(args)
    assert (settings.gpus, settings.quantized_model) == (8, "m-fp8") and gpus_of(cmd) == 1


# ---------------------------------------------------------------------- memory_bandwidth_bound


def test_a_bandwidth_bound_decode_goes_batch_then_fp8_kv_then_a_longer_draft() -> None:
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 2})
    base = ["vllm", "serve", "m", "--max-num-seqs", "32", "--speculative-config", spec]
    full = [_ramp(BANDWIDTH, running=32, kv=0.3)]
    first = _decide("vllm", base, full)
    assert _changes(first) == [("--max-num-seqs", "64")] and first.group == "strategy"
    assert "more sequences share each read of the weights" in first.trade
    second = _decide("vllm", base, full, {first.key})
    assert _changes(second) == [("--kv-cache-dtype", "fp8")] and "half the KV bytes" in second.trade
    # no draft counts at the knee: nothing lengthened blind, the hardware stop with why
    stop = _decide("vllm", base, full, {first.key, second.key})
    assert stop.cmd is None and stop.stop is not None and HARDWARE_STOP in stop.stop
    assert "no draft is lengthened blind" in stop.stop
    # 0.9 per draft token measured over 2: positions up to 6 are accepted at least half the time (0.9^6 = 0.53)
    runs = [_spec_ramp(BANDWIDTH, 0.9, 2)]
    third = _decide("vllm", base, runs, {first.key, second.key})
    assert third.cmd is not None and json.loads(third.cmd.get("--speculative-config") or "{}") == {
        "method": "ngram",
        "num_speculative_tokens": 6,
    }
    assert "latency per user down" in third.trade
    # an acceptance that pays for no more than configured: no longer draft
    low = _decide("vllm", base, [_spec_ramp(BANDWIDTH, 0.6, 2)], {first.key, second.key})
    assert low.cmd is None and low.stop is not None and "pays for no more than the 2 draft tokens" in low.stop


def test_the_batch_is_raised_only_when_measured_full_with_room_in_the_kv_cache() -> None:
    base = ["vllm", "serve", "m", "--max-num-seqs", "32"]
    assert _changes(_decide("vllm", base, [_ramp(BANDWIDTH, running=32, kv=0.8)])) == [("--kv-cache-dtype", "fp8")]
    assert _changes(_decide("vllm", base, [_ramp(BANDWIDTH, running=12, kv=0.1)])) == [("--kv-cache-dtype", "fp8")]
    assert _changes(_decide("vllm", base, [_ramp(BANDWIDTH)])) == [("--kv-cache-dtype", "fp8")]  # not measured


def test_the_bandwidth_sequence_on_the_other_engines() -> None:
    sg = [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "m",
        "--max-running-requests",
        "16",
        "--speculative-num-steps",
        "3",
    ]
    runs = [_ramp(BANDWIDTH, running=16, kv=0.2)]
    seen = [_changes(d) for d in _walk("sglang", sg, runs, None)]
    assert seen == [[("--max-running-requests", "32")], [("--kv-cache-dtype", "fp8_e5m2")]]
    tgi = ["text-generation-launcher", "--model-id", "m", "--max-batch-size", "16"]
    assert [_changes(d) for d in _walk("tgi", tgi, runs, None)] == [
        [("--max-batch-size", "32")],
        [("--kv-cache-dtype", "fp8_e5m2")],
    ]
    trt = ["trtllm-serve", "m", "--max_batch_size", "16"]
    assert [_changes(d) for d in _walk("trtllm", trt, runs, None)] == [[("--max_batch_size", "32")]]
    sim = [*SIM, "--max-num-seqs", "16", "--spec-tokens", "2"]
    assert [_changes(d) for d in _walk("simulator", sim, runs, None)] == [
        [("--max-num-seqs", "32")],
        [("--kv-cache-dtype", "fp8")],  # the simulator models an FP8 cache (exporter/simulator/settings.py)
    ]
    fp8 = [*sim, "--kv-cache-dtype", "fp8"]
    d = _decide("simulator", fp8, [_spec_ramp(BANDWIDTH, 0.95, 2)])  # slots not measured, FP8 already: the draft
    assert _changes(d) == [("--spec-tokens", "13")]  # 0.95^13 = 0.51


# ---------------------------------------------------------------------- compute_bound


QUANTISED_BUILDS = {
    "vllm": (["vllm", "serve", "m"], "model"),
    "sglang": (["python", "-m", "sglang.launch_server", "--model-path", "m"], "--model-path"),
    "tgi": (["text-generation-launcher", "--model-id", "m"], "--model-id"),
    "trtllm": (["trtllm-serve", "m"], "model"),
    "llamacpp": (["llama-server", "-m", "m"], "-m"),
}


@pytest.mark.parametrize("engine", sorted(QUANTISED_BUILDS))
def test_compute_bound_serves_the_quantised_build_named_else_the_hardware_stop(engine: str) -> None:
    argv, flag = QUANTISED_BUILDS[engine]
    stop = _decide(engine, argv, [_ramp(COMPUTE)])
    assert (
        stop.cmd is None
        and stop.stop == f"hardware/compute_bound: {HARDWARE_STOP} (no quantised build named: tune --quantized-model PATH)"
    )
    d = _decide(engine, argv, [_ramp(COMPUTE)], deployment=Deployment(gpus=1, quantized_model="m-fp8"))
    assert d.cmd is not None and [c.as_dict() for c in d.changes] == [{"flag": flag, "from": "m", "to": "m-fp8"}]
    assert d.group == "optimisation" and "for accuracy" in d.trade
    # the recommendation's changes name it too (a positional model argument as ``model``)
    assert [(c.old, c.new) for c in changes_between(EngineCommand.parse(argv, engine), d.cmd)] == [("m", "m-fp8")]
    served = decide(engine, d.cmd, [_ramp(COMPUTE)], SLO_TTFT, {d.key}, Deployment(gpus=1, quantized_model="m-fp8"))
    assert served.cmd is None and served.stop is not None and HARDWARE_STOP in served.stop


def test_the_simulator_models_no_quantised_weights() -> None:
    d = _decide("simulator", SIM, [_ramp(COMPUTE)], deployment=Deployment(gpus=1, quantized_model="q"))
    assert d.cmd is None and d.stop == f"hardware/compute_bound: {HARDWARE_STOP}"


# ---------------------------------------------------------------------- gpu_imbalance


def test_an_expert_or_data_parallel_group_gets_the_engines_balancing() -> None:
    ep = _decide("vllm", ["vllm", "serve", "m", "-tp", "2", "-dp", "2", "--enable-expert-parallel"], [_ramp(IMBALANCE)])
    assert [c.as_dict() for c in ep.changes] == [{"flag": "--enable-eplb", "from": None, "to": "on"}]
    plain = _decide("vllm", ["vllm", "serve", "m", "-tp", "4"], [_ramp(IMBALANCE)])
    assert plain.cmd is None and plain.stop is not None and "the command runs no expert parallelism" in plain.stop
    assert "Check uneven pipeline stages" in plain.stop
    sg = ["python", "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "2", "--dp-size", "2"]
    d = _decide("sglang", sg, [_ramp(IMBALANCE)])
    assert _changes(d) == [("--load-balance-method", "shortest_queue")] and "no replica idles" in d.trade
    assert _changes(_decide("sglang", [*sg, "--ep-size", "4"], [_ramp(IMBALANCE)])) == [("--enable-eplb", "on")]
    for engine, argv in (
        ("tgi", ["text-generation-launcher", "--num-shard", "4"]),
        ("trtllm", ["trtllm-serve", "m", "--tp_size", "4"]),
    ):
        stop = _decide(engine, argv, [_ramp(IMBALANCE)])
        assert stop.cmd is None and stop.stop is not None and f"no automatic move for this cause on {engine};" in stop.stop


# ---------------------------------------------------------------------- the tables, the record, the report


def _before_moves(knob: Knob) -> list[Any]:
    return list(knob.before.moves) if knob.before is not None else []


@pytest.mark.parametrize("engine", ENGINES)
def test_every_new_move_names_its_trade_and_the_entries_keep_their_stop(engine: str) -> None:
    for cause, knob in TABLES[engine].items():
        for move in _before_moves(knob) + [m for m in knob.moves if m.op in (LAYOUT, QUANTISED)]:
            assert "throughput per GPU" in move.trade and "latency per user" in move.trade, (engine, cause, move.flag)
        if knob.before is not None:
            assert knob.limit is not None and not knob.moves and knob.before.moves and knob.before.reason, (engine, cause)


def test_the_trade_is_in_tune_json_and_the_report() -> None:
    base = Measurement("baseline", EngineCommand.parse(["vllm", "serve", "m", "-tp", "4"]))
    d = _decide("vllm", ["vllm", "serve", "m", "-tp", "4"], [_ramp(COMM)])
    assert d.cmd is not None
    result = TuneResult(
        base, [Trial(1, d, Measurement("trial-1", d.cmd), False, "rejected: no run completed", None)], best=base, stop="x"
    )
    result.deployment = Deployment.of(base.cmd)
    doc = record.build(result, SLO_TTFT, "vllm", "launch")
    assert doc["trials"][0]["trade"] == d.trade and doc["trials"][0]["layout"]["gpus"] == 4
    assert doc["deployment"] == {"gpus": 4, "gpus_from": "baseline", "quantized_model": None}
    assert f"Trade: {d.trade}." in report.markdown(doc)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_stop_after_every_move_still_never_contradicts_the_advice(engine: str) -> None:
    """tests/tune/test_tune_knobs.py's check on the stop a bare command ends with, here on the stop each cause
    ends with once every move it has (those tried before the stop included) was measured and rejected."""
    from tests.tune.test_tune_knobs import NO_FLAG, _engine_vocabulary, _named_flags, _names

    vocabulary = _engine_vocabulary()
    for rule in RULES:
        runs = [_ramp((rule.layer, rule.cause), running=8, kv=0.2)]
        tried = {d.key for d in _walk(engine, LAYOUTS[engine], runs, Deployment(gpus=8, quantized_model="q"))}
        last = _decide(engine, LAYOUTS[engine], runs, tried, Deployment(gpus=8, quantized_model="q"))
        said = last.stop or ""
        assert last.cmd is None and said.startswith(f"{rule.layer}/{rule.cause}: "), (engine, rule.cause, said)
        if NO_FLAG in said:
            named = sorted(w for w in vocabulary if _names(rule.advice, w))
            assert not named, f"{engine}/{rule.cause}: the stop says {NO_FLAG!r}, the advice names {named}"
        knob = TABLES[engine][rule.cause]
        moved = {m.flag for m in knob.moves} | {m.flag for m in _before_moves(knob)}
        for named_for, flags in _named_flags(rule.advice):
            if named_for == engine:
                assert moved & flags or any(f in said for f in flags), f"{engine}/{rule.cause}: advice names {flags}"
