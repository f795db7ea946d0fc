"""The simulator's parallel layouts (issue 33): vLLM's -tp/-pp/-dp and --interconnect, in model time.

Every figure is checked against the model shape and the link figures of
exporter/simulator/roofline.py, never against a wall clock: the roofline is called
directly, and the data-parallel engine is driven step by step in model time through
its own dispatch, start and finish code (``drive``), without its thread.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time

import pytest

from exporter.commands import simulate as sim_cli
from exporter.engines import settings as engine_settings
from exporter.simulator import calibration as cal
from exporter.simulator import dialects, scenarios
from exporter.simulator.engine import (
    Engine,
    eager_launch_s,
    fb_used_mib,
    gpu_params,
    rank_block_bytes,
    replica_config,
    replica_kv_blocks,
)
from exporter.simulator.gpu import GpuTelemetry, link_readings
from exporter.simulator.requests import SimRequest
from exporter.simulator.roofline import (
    MIB,
    NCCL_BASE_LATENCY_S,
    NVLINK_BYTES_S,
    GpuParams,
    GpuStep,
    StepWork,
    allreduce_latency_s,
    stage_layers,
    step_cost,
)
from exporter.simulator.scheduler import Scheduler
from exporter.simulator.settings import SimConfig, apply_overrides
from exporter.simulator.stats import EngineStats

GEO = SimConfig().geometry  # the default model: Llama-3-8B (32 layers, hidden 4096, 8 KV heads of 128, bf16)


def parse(*argv: str) -> dict[str, object]:
    parser = argparse.ArgumentParser()
    sim_cli.add_arguments(parser)
    return sim_cli.overrides_from_args(parser.parse_args(list(argv)))


def decode(batch: int, context: int) -> StepWork:
    return StepWork(
        decode_tokens=batch, decode_seqs=batch, seqs=batch, attention_pairs=batch * context, kv_read_tokens=batch * context
    )


def prefill(tokens: int) -> StepWork:
    return StepWork(prefill_tokens=tokens, seqs=1, attention_pairs=tokens * tokens / 2)


def cost(work: StepWork, **layout: object) -> list[GpuStep]:
    return step_cost(work, gpu_params(apply_overrides(SimConfig(), layout)))


# ----------------------------------------------------------------------------- flags


def test_vllm_spellings_long_and_short_are_the_layout_flags() -> None:
    short = parse("-tp", "4", "-pp", "2", "-dp", "2", "--interconnect", "pcie")
    long = parse(
        "--tensor-parallel-size", "4", "--pipeline-parallel-size=2", "--data-parallel-size", "2", "--interconnect", "pcie"
    )
    assert (
        short
        == long
        == {
            "tensor_parallel_size": 4,
            "pipeline_parallel_size": 2,
            "data_parallel_size": 2,
            "interconnect": "pcie",
        }
    )
    cfg = scenarios.get("healthy").config(overrides=short)
    lay = cfg.layout
    assert (lay.tp, lay.pp, lay.dp, lay.interconnect, lay.gpus, lay.modelled) == (4, 2, 2, "pcie", 16, True)
    assert cfg.total_gpus == 16
    # a scenario's launch flags in vLLM's spelling become the same settings
    launch = scenarios.Scenario("x", "", "", launch=("--tensor-parallel-size", "2", "--data-parallel-size", "2"))
    assert launch.launch_settings() == {"tensor_parallel_size": "2", "data_parallel_size": "2"}
    assert apply_overrides(SimConfig(), launch.launch_settings()).layout.gpus == 4


def test_the_exporter_reads_the_layout_from_the_simulators_command_line() -> None:
    # the exporter reads launch settings from /proc/PID/cmdline with the vLLM flag table: the simulator's
    # own command line, as `simulate` and `tune` write it, must read as the layout it runs
    for argv in (
        ["python", "-m", "exporter.simulator", "-tp", "4", "-pp", "2", "-dp", "2"],
        [
            "llm-layer-exporter",
            "simulate",
            "--tensor-parallel-size",
            "4",
            "--pipeline-parallel-size",
            "2",
            "--data-parallel-size",
            "2",
        ],
    ):
        got = engine_settings.from_argv("vllm", argv).numbers
        assert (got["tensor_parallel_size"], got["pipeline_parallel_size"], got["data_parallel_size"]) == (4.0, 2.0, 2.0)
        simulated = parse(*argv[3:] if argv[0] == "python" else argv[2:])
        assert simulated == {"tensor_parallel_size": 4, "pipeline_parallel_size": 2, "data_parallel_size": 2}


@pytest.mark.parametrize("flag", ["-tp", "-pp", "-dp"])
@pytest.mark.parametrize("value", ["1.5", "two", ""])
def test_non_integers_are_refused_by_the_command_line(flag: str, value: str) -> None:
    with pytest.raises(SystemExit):
        parse(flag, value)


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        ({"tensor_parallel_size": 0}, "tensor_parallel_size"),
        ({"pipeline_parallel_size": -1}, "pipeline_parallel_size"),
        ({"data_parallel_size": 0}, "data_parallel_size"),
        ({"tensor_parallel_size": 1.5}, "tensor_parallel_size"),
        ({"tensor_parallel_size": "four"}, "tensor_parallel_size"),
        # 32 attention heads (hidden 4096 / head_dim 128) do not split over 3 or 64 GPUs: vLLM refuses both
        ({"tensor_parallel_size": 3}, "attention heads"),
        ({"tensor_parallel_size": 64}, "attention heads"),
        # 6 KV heads neither split over 4 GPUs nor replicate evenly onto them (hidden 3072: 24 heads, TP 4 divides those)
        ({"tensor_parallel_size": 4, "kv_heads": 6, "hidden": 3072}, "KV heads"),
        ({"pipeline_parallel_size": 33}, "33 stages for 32 layers"),
        ({"tensor_parallel_size": 8, "pipeline_parallel_size": 4, "data_parallel_size": 4}, "at most 64"),
        ({"interconnect": "infiniband"}, "interconnect"),
        # the pre-layout --gpus group is NVLink only: a PCIe layout is given with -tp
        ({"gpus": 4, "interconnect": "pcie"}, "--tensor-parallel-size"),
    ],
)
def test_bad_layouts_are_refused_naming_the_setting(overrides: dict[str, object], names: str) -> None:
    with pytest.raises(ValueError, match=names):
        apply_overrides(SimConfig(), overrides)


def test_accepted_edges_tp_beyond_kv_heads_replicates_them_and_uneven_stages() -> None:
    cfg = apply_overrides(SimConfig(), {"tensor_parallel_size": 16})  # 32 heads / 16, 8 KV heads replicated x2
    assert gpu_params(cfg).kv_replication == 2.0
    assert rank_block_bytes(cfg) == 16 * 2 * 32 * 1 * 128 * 2  # one whole KV head per GPU
    # vLLM's get_pp_indices: the remainder goes one apiece to the stages before the last
    assert stage_layers(32, 3) == [11, 11, 10]
    assert stage_layers(30, 4) == [7, 8, 8, 7]
    assert sum(stage_layers(80, 7)) == 80


# ----------------------------------------------------------------------------- tensor parallel: the all-reduce


def test_all_reduce_time_is_bytes_over_the_link_plus_nccls_latency() -> None:
    work = prefill(2048)  # one full step of the default per-step token budget (max_num_batched_tokens 2048)
    for link, rate in (("pcie", cal.PCIE_H2D_MIB_S * MIB), ("nvlink", NVLINK_BYTES_S)):
        rank = cost(work, tensor_parallel_size=4, interconnect=link)[0]
        # 2 all-reduces per layer of tokens x hidden x 2 bytes; a ring moves 2 (n - 1) / n of it per GPU
        ring_bytes = 2 * 32 * 2048 * 4096 * 2 * 2 * 3 / 4
        calls = 2 * 32
        assert rank.link_tx_bytes == rank.link_rx_bytes == pytest.approx(ring_bytes)
        latency = NCCL_BASE_LATENCY_S + 2 * 3 * {"pcie": 1.0e-6, "nvlink": 0.6e-6}[link]
        assert allreduce_latency_s(4, link) == pytest.approx(latency)
        assert rank.comm_s == pytest.approx(ring_bytes / rate + calls * latency)


def test_tp4_over_pcie_is_dominated_by_communication_over_nvlink_it_is_not() -> None:
    """8B model, TP 4 (each GPU reads 4 GB of weights per step at 4.8 TB/s x 0.866).

    A 2048-token step: PCIe comm 28.2 ms against 16.1 ms of compute (x1.76, 64 % of the step);
    NVLink 4.2 ms (x0.26, 21 %). A decode of 256 sequences at 1k context: PCIe x1.31, NVLink x0.34.
    """
    for work, pcie_at_least, nvlink_at_most in ((prefill(2048), 1.7, 0.3), (decode(256, 1024), 1.25, 0.4)):
        pcie = cost(work, tensor_parallel_size=4, interconnect="pcie")[0]
        nvlink = cost(work, tensor_parallel_size=4, interconnect="nvlink")[0]
        assert pcie.kernel_s - pcie.comm_s == pytest.approx(nvlink.kernel_s - nvlink.comm_s)  # same compute either way
        compute = pcie.kernel_s - pcie.comm_s
        assert pcie.comm_s / compute >= pcie_at_least
        assert nvlink.comm_s / compute <= nvlink_at_most
        assert pcie.comm_s > pcie.kernel_s / 2 > nvlink.comm_s
    # the link time reads as a copy (bytes moving, SMs idle): SM active falls with the communication share
    assert cost(prefill(2048), tensor_parallel_size=4, interconnect="pcie")[0].kernel_profile["sm_util"] < 40
    assert cost(prefill(2048), tensor_parallel_size=4, interconnect="nvlink")[0].kernel_profile["sm_util"] > 70


def test_each_rank_reads_one_tp_th_of_the_weights_and_kv() -> None:
    one = cost(decode(64, 1024), data_parallel_size=2)[0]  # a modelled layout of one GPU per replica
    four = cost(decode(64, 1024), tensor_parallel_size=4)
    assert len(four) == 4
    for rank in four:
        assert rank.bytes == pytest.approx(one.bytes / 4)
        assert rank.flops == pytest.approx(one.flops / 4)


# ----------------------------------------------------------------------------- pipeline parallel


def test_pipeline_splits_layers_in_micro_batches_with_a_bubble() -> None:
    pp2 = cost(decode(64, 1024), pipeline_parallel_size=2)
    assert len(pp2) == 2
    m, pp = 2, 2  # one micro-batch per stage
    tau = [rank.kernel_s / m for rank in pp2]  # a stage's time per micro-batch
    for rank in pp2:
        assert rank.span_s == pytest.approx(sum(tau) + (m - 1) * max(tau))
        # stages nearly equal (stage 0 also sends): the bubble is (pp - 1) / (m + pp - 1) = 1/3
        assert rank.stall_s / rank.span_s == pytest.approx((pp - 1) / (m + pp - 1), rel=0.01)
    # stage 0 hands its activations (tokens x hidden x 2 bytes, per micro-batch) to stage 1
    hop = 64 * 4096 * 2
    assert pp2[0].link_tx_bytes - pp2[0].link_rx_bytes == pytest.approx(hop)
    assert pp2[1].link_rx_bytes - pp2[1].link_tx_bytes == pytest.approx(hop)
    # each stage reads half the weights per micro-batch, so a memory-bound decode step gets longer, not shorter
    single = cost(decode(64, 1024), data_parallel_size=2)[0]
    assert pp2[0].span_s > single.span_s
    # one request cannot be split: one micro-batch, a bubble of (pp - 1) / pp
    lone = cost(decode(1, 1024), pipeline_parallel_size=2)
    assert lone[0].stall_s / lone[0].span_s == pytest.approx(1 / 2, rel=0.01)


def test_tp_and_pp_rank_order_is_stage_by_stage() -> None:
    ranks = cost(decode(64, 512), tensor_parallel_size=2, pipeline_parallel_size=2, interconnect="pcie")
    assert len(ranks) == 4
    stage0, stage1 = ranks[:2], ranks[2:]
    assert all(r.link_tx_bytes > r.link_rx_bytes for r in stage0)  # the all-reduce plus the send
    assert all(r.link_rx_bytes > r.link_tx_bytes for r in stage1)
    assert all(r.over_pcie for r in ranks)


# ----------------------------------------------------------------------------- KV capacity


def test_kv_capacity_grows_with_tp_by_the_weights_each_gpu_no_longer_holds() -> None:
    base = SimConfig()
    block_bytes = base.block_size * GEO.kv_bytes_per_token  # 16 tokens x 128 KiB
    blocks = {tp: replica_kv_blocks(apply_overrides(base, {"tensor_parallel_size": tp})) for tp in (1, 2, 4, 8)}
    assert blocks[1] == base.num_gpu_blocks == 4096
    for tp in (2, 4, 8):
        # each GPU: the same memory as one GPU at TP 1 (4096 blocks' worth) plus the (tp - 1)/tp of 16 GB of weights
        per_gpu = 4096 * block_bytes + GEO.weight_bytes * (tp - 1) / tp
        assert blocks[tp] == int(per_gpu // (block_bytes / tp))
    assert blocks[1] < blocks[2] < blocks[4] < blocks[8]
    assert blocks[4] > 4 * blocks[1]  # more than linear: 39,271 blocks at TP 4 against 4,096
    # every GPU then holds about the memory the single GPU held (vLLM's --gpu-memory-utilization is per GPU)
    for tp in (2, 4, 8):
        cfg = apply_overrides(base, {"tensor_parallel_size": tp})
        assert fb_used_mib(cfg) == pytest.approx(fb_used_mib(base), abs=1.0)
    # a replica's scheduler gets its own pool; the pre-layout --gpus group keeps the pool as given
    assert replica_config(apply_overrides(base, {"tensor_parallel_size": 4})).num_gpu_blocks == blocks[4]
    assert replica_kv_blocks(apply_overrides(base, {"gpus": 4})) == 4096


def test_pipeline_stages_and_data_parallel_replicas_hold_their_own_kv() -> None:
    pp2 = apply_overrides(SimConfig(), {"pipeline_parallel_size": 2})
    tp2 = apply_overrides(SimConfig(), {"tensor_parallel_size": 2})
    assert replica_kv_blocks(pp2) == replica_kv_blocks(tp2)  # half the layers or half the heads: the same bytes
    dp2 = apply_overrides(SimConfig(), {"data_parallel_size": 2})
    assert replica_kv_blocks(dp2) == 4096
    engine = Engine(dp2)
    assert [r.scheduler.pool.total for r in engine.replicas] == [4096, 4096]
    assert engine.snapshot().kv_blocks_total == 8192


# ----------------------------------------------------------------------------- data parallel


def _requests(n: int, prompt: int = 256, out: int = 64) -> list[SimRequest]:
    return [
        SimRequest(
            id=f"q{i}",
            prompt_ids=[(i * 7919 + j) & 0xFFFFFF for j in range(prompt)],
            max_tokens=out,
            streaming=True,
            sink=lambda e: None,
            arrival=0.0,
            seed=i + 1,
        )
        for i in range(n)
    ]


def drive(engine: Engine, requests: list[SimRequest], limit: int = 100_000) -> float:
    """Run the engine's own dispatch, start and finish code in model time, without its thread; returns the
    model seconds until every replica is idle."""
    engine._inbox.extend(requests)
    t = 0.0
    for _ in range(limit):
        with engine._cond:
            engine._take_inbox()
            engine._start_steps(t, 1.0)
            flying = [r.step.remaining for r in engine.replicas if r.step is not None]
            if not flying:
                return t
            dt = min(flying)
            t += dt
            engine._finish_steps(t, dt)
    raise AssertionError("the engine did not drain")


def test_dp2_doubles_throughput_at_equal_per_replica_load() -> None:
    one = Engine(SimConfig())
    t_one = drive(one, _requests(48))
    two = Engine(apply_overrides(SimConfig(), {"data_parallel_size": 2}))
    t_two = drive(two, _requests(96))
    tokens_one = one.stats.freeze().counter("generation_tokens")
    tokens_two = two.stats.freeze().counter("generation_tokens")
    assert (tokens_one, tokens_two) == (48 * 64, 96 * 64)
    # each replica served 48 of them, in the same model time as the single server: twice the tokens per second
    assert t_two == pytest.approx(t_one, rel=1e-9)
    assert (tokens_two / t_two) / (tokens_one / t_one) == pytest.approx(2.0, rel=1e-9)
    assert [r.scheduler.stats is two.stats for r in two.replicas] == [True, True]  # one endpoint's statistics


def test_requests_go_to_the_least_loaded_replica() -> None:
    engine = Engine(apply_overrides(SimConfig(), {"data_parallel_size": 3}))
    engine._inbox.extend(_requests(7))
    engine._take_inbox()
    # vLLM's score 4 x waiting + running, the lowest index on a tie: 7 requests spread 3 / 2 / 2
    assert [len(r.scheduler.waiting) for r in engine.replicas] == [3, 2, 2]
    engine.replicas[0].scheduler.running.extend(engine.replicas[0].scheduler.waiting)
    engine.replicas[0].scheduler.waiting.clear()
    engine._inbox.extend(_requests(1))
    engine._take_inbox()  # replica 0: 3 running = 3, the others 2 waiting = 8
    assert [len(r.scheduler.waiting) for r in engine.replicas] == [1, 2, 2]


def test_dp_engine_serves_through_its_own_thread() -> None:
    """The threaded loop (bounded wait for completion; no timing asserted)."""
    engine = Engine(apply_overrides(SimConfig(), {"data_parallel_size": 2, "tensor_parallel_size": 2, "time_scale": 50.0}))
    engine.start()
    finished: list[str] = []
    try:
        for i in range(12):
            engine.submit(list(range(i, i + 200)), 16, True, lambda e: finished.append(e.text) if e.finish_reason else None)
        deadline = time.monotonic() + 30
        while len(finished) < 12 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(finished) == 12
        state = engine.snapshot().state()
        assert state["gpus"] == 4 and state["layout"]["data_parallel_size"] == 2
        assert state["requests"]["finished"] == {"length": 12.0}
        readings = engine.gpu_readings()
        assert len(readings) == 4 and len({r["uuid"] for r in readings}) == 4
    finally:
        engine.stop()


# ----------------------------------------------------------------------------- per-GPU telemetry


def _telemetry(cfg: SimConfig, work: StepWork) -> tuple[list[dict[str, object]], float]:
    steps = step_cost(work, gpu_params(cfg))
    duration = max(s.span_s for s in steps)
    wall = [0.0]
    tel = GpuTelemetry(len(steps), 10.0, fb_used_mib(cfg), cfg.power_limit_w, cfg.seed, wall=lambda: wall[0])
    tel.static = link_readings(cfg)
    tel.record(duration, 1.0, steps)
    wall[0] = duration
    return tel.readings(), duration


def test_link_bytes_show_on_the_link_they_cross() -> None:
    work = prefill(2048)
    ring = 2 * 32 * 2048 * 4096 * 2 * 2 * 3 / 4
    for link in ("nvlink", "pcie"):
        cfg = apply_overrides(SimConfig(), {"tensor_parallel_size": 4, "interconnect": link})
        readings, duration = _telemetry(cfg, work)
        assert len(readings) == 4
        rate = round(ring / duration / MIB, 3)
        for r in readings:
            on, off = ("nvlink", "pcie") if link == "nvlink" else ("pcie", "nvlink")
            assert r[f"{on}_tx_mib_s"] == r[f"{on}_rx_mib_s"] == pytest.approx(rate)
            assert r[f"{off}_tx_mib_s"] == r[f"{off}_rx_mib_s"] == 0.0
            # no link carries more than its rate
            sent = r[f"{on}_tx_mib_s"]
            assert isinstance(sent, float) and sent <= (cal.PCIE_H2D_MIB_S if link == "pcie" else NVLINK_BYTES_S / MIB)
            assert r["pcie_link_gen"] == 5 and r["pcie_link_width"] == 16
            assert r["nvlink_links"] == (18 if link == "nvlink" else 0)


def test_every_gpu_of_a_layout_has_a_reading_replica_by_replica() -> None:
    cfg = apply_overrides(
        SimConfig(), {"tensor_parallel_size": 2, "pipeline_parallel_size": 2, "data_parallel_size": 2, "interconnect": "pcie"}
    )
    engine = Engine(cfg)
    readings = engine.gpu_readings()
    assert len(readings) == 2 * 2 * 2
    assert len({r["uuid"] for r in readings}) == 8
    # the first replica's GPUs are those a one-replica server would have: same uuids, in order
    single = Engine(apply_overrides(cfg, {"data_parallel_size": 1})).gpu_readings()
    assert [r["uuid"] for r in readings[:4]] == [r["uuid"] for r in single]
    steps = step_cost(decode(32, 512), gpu_params(cfg))
    assert len(steps) == 4  # one replica's tp x pp
    assert readings[0]["fb_used_mib"] == round(fb_used_mib(cfg))


def test_a_narrowed_pcie_link_reads_as_a_narrower_link() -> None:
    cfg = apply_overrides(SimConfig(), {"tensor_parallel_size": 2, "pcie_mib_s": 8000.0})
    assert link_readings(cfg)["pcie_link_width"] == 4  # 8,000 MiB/s fits Gen5 x4 (15.8 GB/s), not x2
    assert link_readings(SimConfig()) == {}  # no layout: the readings stay as they were


# ----------------------------------------------------------------------------- 1/1/1 is the simulator as it was

#: sha256 (first 16 hex digits) of ``_trace(scenario)``, recorded with the code before layouts existed
#: (commit 0859a6c): step durations, per-GPU costs and /sim/gpu readings of 400 steps of a fixed load
#: through every scenario's configuration. Recompute only when the 1/1/1 model changes on purpose.
GOLDEN = {
    "healthy": "e36aa1ebcda942f1",
    "healthy_busy": "2c2d0d178b39d955",
    "shared_prefix": "463aae45b4c82e7f",
    "kv_pressure": "6603517133bdea5b",
    "kv_fragmentation": "5c33ee2201281056",
    "host_bound": "04c9a654dd5fe7b8",
    "memory_bandwidth_bound": "4dc92439d815078b",
    "power_throttled": "4c63bacbdb0dd7d7",
    "pcie_bound": "c0be49771badc37d",
    "low_spec_acceptance": "8b0e21b74a72b528",
    "tp_imbalance": "793b2d11beb9a102",
    "batching_window": "bb3426e5ec24a575",
    "queue_backlog": "fc0f24785c50061d",
    "eager_decode": "b9161fe28c8bf207",
    "long_prompts_small_chunk": "68accbb2a00e7d70",
    "over_reserved_context": "00db7efe78de1e5b",
}


def _configs(name: str, explicit: bool) -> SimConfig:
    sc = scenarios.get(name)
    cfg = dialects.fitted(sc.dialect or "vllm", apply_overrides(sc.config(), sc.launch_settings()))
    if explicit:  # the layout flags written out at their defaults
        cfg = apply_overrides(
            cfg, {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "data_parallel_size": 1, "interconnect": "nvlink"}
        )
    return cfg


def _trace(cfg: SimConfig) -> dict[str, object]:
    """What the engine computes per step (exporter/simulator/engine.py ``_run``) for a fixed load, driven in model time."""
    sch = Scheduler(replica_config(cfg), EngineStats())
    wall = [0.0]
    tel = GpuTelemetry(cfg.gpus, 1.0, fb_used_mib(cfg), cfg.power_limit_w, cfg.seed, wall=lambda: wall[0])
    params = gpu_params(cfg)
    shared = [7 * i + 1 for i in range(300)]
    for i in range(48):
        n = (128, 512, 1024, 3000)[i % 4]
        ids = (shared if i % 3 == 0 else []) + [(i * 7919 + j * 104729) & 0xFFFFFFF for j in range(n)]
        sch.submit(
            SimRequest(
                id=f"g{i}",
                prompt_ids=ids,
                max_tokens=(16, 64, 200)[i % 3],
                streaming=True,
                sink=lambda e: None,
                arrival=0.0,
                seed=i + 1,
            )
        )
    t = 0.0
    out: list[object] = []
    readings: list[object] = []
    for k in range(400):
        plan = sch.schedule(t)
        if plan.empty:
            break
        work = plan.work(cfg.spec_tokens)
        work.eager_launch_s = eager_launch_s(cfg, work)
        steps = step_cost(work, params)
        gpu_s = max(s.span_s for s in steps)
        host_s = cfg.host_base_s + cfg.host_per_seq_s * len(plan.items) + cfg.host_per_token_s * work.tokens
        duration = max(host_s, gpu_s) if cfg.overlap_host else host_s + gpu_s
        tel.record(duration, 1.0, steps)
        out.append(
            [duration, gpu_s]
            + [
                [
                    s.kernel_s,
                    s.copy_s,
                    s.kernel_power_w,
                    s.clock_scale,
                    s.nvlink_bytes,
                    s.h2d_bytes,
                    s.d2h_bytes,
                    sorted(s.kernel_profile.items()),
                ]
                for s in steps
            ]
        )
        wall[0] += duration
        t += duration
        sch.apply(plan, t)
        if k % 50 == 49:
            readings.append(tel.readings())
    readings.append(tel.readings())
    return {"steps": out, "readings": readings, "fb": fb_used_mib(cfg), "blocks": sch.pool.total}


def _digest(cfg: SimConfig) -> str:
    return hashlib.sha256(json.dumps(_trace(cfg), sort_keys=True).encode()).hexdigest()[:16]


def test_the_golden_record_covers_every_scenario() -> None:
    assert set(GOLDEN) == set(scenarios.NAMES)


@pytest.mark.parametrize("explicit", [False, True], ids=["defaults", "flags-written-at-1"])
@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_one_one_one_is_bit_for_bit_the_simulator_before_layouts(name: str, explicit: bool) -> None:
    cfg = _configs(name, explicit)
    assert not cfg.layout.modelled and cfg.layout.dp == 1
    assert replica_config(cfg) is cfg
    assert _digest(cfg) == GOLDEN[name]


def test_the_layout_path_at_one_gpu_costs_what_the_pre_layout_path_does() -> None:
    """The same step with and without the layout model (GpuParams.modelled) at 1 GPU: identical."""
    works = [
        decode(1, 128),
        decode(64, 1024),
        prefill(2048),
        StepWork(h2d_bytes=2 * 1024**3),
        StepWork(decode_tokens=8, decode_seqs=8, draft_passes=4, eager_launch_s=0.004),
    ]
    for work in works:
        for params in (GpuParams(), GpuParams(power_limit_w=400.0), GpuParams(hbm_bytes_s=200e9)):
            before = step_cost(work, params)
            after = step_cost(work, GpuParams(**{**params.__dict__, "modelled": True}))
            assert after == before
    # one replica of a data-parallel server is the single GPU, step for step
    dp2 = apply_overrides(SimConfig(), {"data_parallel_size": 2})
    assert gpu_params(dp2) == GpuParams(**{**gpu_params(SimConfig()).__dict__, "modelled": True})
    assert fb_used_mib(dp2) == fb_used_mib(SimConfig())


def test_a_one_replica_engine_has_one_scheduler_and_the_pre_layout_readings() -> None:
    for name in scenarios.NAMES:
        engine = Engine(_configs(name, False))
        assert len(engine.replicas) == 1 and engine.scheduler is engine.replicas[0].scheduler
        assert engine.gpu_readings()[0].keys() == _pre_layout_reading_keys()


def _pre_layout_reading_keys() -> set[str]:
    return {
        "nvml_gpu_util",
        "nvml_mem_util",
        "sm_util",
        "sm_occupancy",
        "tensor_util",
        "dram_bw_util",
        "pcie_rx_mib_s",
        "pcie_tx_mib_s",
        "nvlink_rx_mib_s",
        "nvlink_tx_mib_s",
        "fb_used_mib",
        "fb_total_mib",
        "power_w",
        "power_limit_w",
        "sm_clock_mhz",
        "sm_clock_max_mhz",
        "mem_clock_mhz",
        "throttle_reasons",
        "temp_c",
        "energy_mj",
        "gpu_name",
        "uuid",
    }


# ----------------------------------------------------------------------------- the KV cache's element type


@pytest.mark.parametrize("dtype", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_an_fp8_kv_cache_holds_twice_the_blocks_in_the_same_memory(dtype: str) -> None:
    base = SimConfig()
    fp8 = apply_overrides(base, {"kv_cache_dtype": dtype})
    assert fp8.geometry.kv_bytes_per_token == GEO.kv_bytes_per_token // 2
    assert replica_kv_blocks(fp8) == 2 * base.num_gpu_blocks
    assert replica_config(fp8).num_gpu_blocks == 2 * base.num_gpu_blocks  # what the scheduler admits into
    assert fb_used_mib(fp8) == pytest.approx(fb_used_mib(base), abs=1.0)  # the pool's memory is unchanged
    for tp in (2, 4):  # a layout's pool too: the same memory per GPU, in blocks of half the bytes
        plain, narrow = (apply_overrides(c, {"tensor_parallel_size": tp}) for c in (base, fp8))
        assert replica_kv_blocks(narrow) in (2 * replica_kv_blocks(plain), 2 * replica_kv_blocks(plain) + 1)
        assert fb_used_mib(narrow) == pytest.approx(fb_used_mib(plain), abs=1.0)


def test_an_fp8_kv_cache_halves_the_kv_bytes_a_decode_step_reads_not_the_weights() -> None:
    plain = step_cost(decode(64, 2048), gpu_params(SimConfig()))[0]
    fp8 = step_cost(decode(64, 2048), gpu_params(apply_overrides(SimConfig(), {"kv_cache_dtype": "fp8"})))[0]
    kv = 64 * (2048 + 1) * GEO.kv_bytes_per_token
    assert plain.bytes - fp8.bytes == pytest.approx(kv / 2, rel=1e-6)
    assert fp8.bytes > GEO.weight_bytes  # the weights are still read whole
    assert fp8.kernel_s < plain.kernel_s


def test_the_kv_cache_dtype_flag_is_checked_and_reported_as_vllm_does() -> None:
    assert parse("--kv-cache-dtype", "fp8") == {"kv_cache_dtype": "fp8"}
    with pytest.raises(ValueError, match="kv_cache_dtype: expected one of auto"):
        apply_overrides(SimConfig(), {"kv_cache_dtype": "int3"})
    engine = Engine(apply_overrides(SimConfig(), {"kv_cache_dtype": "fp8_e5m2"}))
    labels = dialects.vllm.cache_config_labels(engine.snapshot(), "0")
    assert labels["cache_dtype"] == "fp8_e5m2"
