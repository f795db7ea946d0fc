"""The parallel layout, per-GPU and per-user figures and the scaling efficiency (exporter/capacity/layout.py),
on records of the shape exporter/ramp/report.py writes, and the live gauge the capacity step publishes from them.

The worked example throughout: one model served as TP 1 carries 800 output tokens/s at its SLO (concurrency 8),
as TP 4 1984 tokens/s (concurrency 32): 496 per GPU, 0.62 of TP 1's, 2.48x the throughput for 4x the GPUs.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from exporter.capacity.atslo import DIAGNOSIS_SLO, Capacity
from exporter.capacity.layout import (
    GPUS_ASSUMED,
    GPUS_FROM_INFO,
    GPUS_FROM_LAYOUT,
    Layout,
    Scaled,
    efficiency,
    layout_from,
    layout_of_fingerprint,
    parse_layout,
    per_user,
    smallest_against,
)
from exporter.capacity.live import LiveLoad
from exporter.capacity.profile import load_profile
from exporter.capacity.source import CapacityProfileStep, scaling_efficiency
from exporter.ramp.report import build_report, render_markdown
from exporter.samples import Point, Sample
from exporter.store import SnapshotStore
from tests.capacity.profiles import tune_doc, write
from tests.ramp.ramp_steps import table

TP = "tensor_parallel_size"
SENTENCE = "TP 4 (4 GPUs) gives 0.62 of TP 1's per-GPU throughput: 2.5x the throughput for 4x the GPUs"


def _fp(tp: float | None = None, gpu_count: int | None = None, model: str = "m", **more: float) -> dict[str, Any]:
    settings: dict[str, float] = {} if tp is None else {TP: tp}
    settings.update(more)
    out: dict[str, Any] = {"engine": "vllm", "model": model, "settings": settings}
    if gpu_count is not None:
        out["gpu_count"] = gpu_count
    return out


def ramp(rows: list[tuple[int, float, float]], fingerprint: dict[str, Any] | None) -> dict[str, Any]:
    return build_report(table(rows), None, None, {"prompt_tokens": 512}, fingerprint=fingerprint)


#: TP 1: 800 tok/s at concurrency 8 within the 2 s TTFT SLO, concurrency 16 past it
TP1_ROWS = [(1, 100.0, 0.1), (4, 400.0, 0.3), (8, 800.0, 0.8), (16, 900.0, 3.0)]
#: TP 4: 1984 tok/s at concurrency 32 within the SLO
TP4_ROWS = [(8, 800.0, 0.1), (16, 1500.0, 0.3), (32, 1984.0, 1.2), (64, 2100.0, 4.0)]


# ------------------------------------------------------------------ the layout


def test_the_layout_from_published_settings_the_gpus_read_or_neither() -> None:
    published = layout_from({TP: 4.0, "pipeline_parallel_size": 2.0}, gpus_seen=8)
    assert published.shape == (4, 2, 1, 8) and published.gpus_from == GPUS_FROM_LAYOUT and published.assumed == ("dp",)
    assert published.gpus_seen == 8 and published.describe() == "TP 4 × PP 2" and published.with_gpus() == "TP 4 × PP 2 (8 GPUs)"
    # nothing published: the GPUs the exporter read, else one assumed
    seen = layout_from({}, gpus_seen=2)
    assert seen.shape == (1, 1, 1, 2) and seen.gpus_from == GPUS_FROM_INFO and seen.assumed == ("tp", "pp", "dp")
    assert layout_from({}).gpus_from == GPUS_ASSUMED and layout_from({}).with_gpus() == "1 GPU"
    assert layout_from({TP: 1.0}).with_gpus() == "TP 1 (1 GPU)"
    # an 8-GPU node seen, TP 1 published: the engine's one GPU, the node's eight kept beside it
    node = layout_from({TP: 1.0}, gpus_seen=8)
    assert node.gpus == 1 and node.gpus_seen == 8
    assert layout_from({"data_parallel_size": 4.0}).describe() == "TP 1 × DP 4"


@pytest.mark.parametrize("bad", [0, -2, 2.5, math.nan, math.inf, 10**6, True, "4", None])
def test_a_dimension_that_is_not_one_counts_as_unknown(bad: Any) -> None:
    got = layout_from({TP: bad})
    assert got.tp == 1 and "tp" in got.assumed


def test_a_tune_command_line_says_the_layout_and_its_defaults() -> None:
    """tune records the command line it started: a flag not written is the engine's default, not unknown."""
    written = layout_of_fingerprint({"engine": "vllm", "settings": {}, "argv": ["vllm", "serve", "m", "-tp", "2", "-pp", "2"]})
    assert written.shape == (2, 2, 1, 4) and written.assumed == () and written.gpus_from == GPUS_FROM_LAYOUT
    bare = layout_of_fingerprint({"engine": "vllm", "settings": {}, "argv": ["vllm", "serve", "m"], "gpu_count": 8})
    assert bare.shape == (1, 1, 1, 1) and bare.gpus_from == GPUS_FROM_LAYOUT and bare.gpus_seen == 8
    # the published setting wins over the command line; llama.cpp has no layout flag: its GPUs are the ones read
    served = layout_of_fingerprint({"engine": "vllm", "settings": {TP: 4.0}, "argv": ["vllm", "serve", "-tp", "2"]})
    assert served.tp == 4
    llama = layout_of_fingerprint({"engine": "llamacpp", "settings": {}, "argv": ["llama-server", "-np", "4"], "gpu_count": 2})
    assert llama.gpus == 2 and llama.gpus_from == GPUS_FROM_INFO


def test_a_recorded_layout_reads_back_and_garbage_does_not() -> None:
    lay = layout_from({TP: 4.0}, gpus_seen=8)
    assert parse_layout(lay.as_dict()) == lay
    assert parse_layout(None) is None and parse_layout({"tp": 4}) is None and parse_layout({**lay.as_dict(), "gpus": -1}) is None


# ------------------------------------------------------------------ per GPU, per user, efficiency on ramp records


def test_a_ramp_record_carries_its_layout_and_per_gpu_and_per_user_figures() -> None:
    doc = ramp(TP4_ROWS, _fp(4.0, gpu_count=8))
    assert doc["capacity_at_slo"] == {
        "concurrency": 32,
        "requests_per_second": 10.0,
        "tokens_per_second": 1984.0,
        "slo": {"ttft_s": DIAGNOSIS_SLO.ttft_s, "itl_s": DIAGNOSIS_SLO.itl_s},
    }
    assert doc["layout"] == {"tp": 4, "pp": 1, "dp": 1, "gpus": 4, "gpus_from": "layout", "gpus_seen": 8, "assumed": ["pp", "dp"]}
    assert doc["per_gpu"] == {"output_tokens_per_second_at_slo": 496.0, "requests_per_second_at_slo": 2.5}
    assert doc["per_user_output_tokens_per_second"] == 62.0  # 1984 tok/s over 32 clients
    # the fields every report had before are all still there
    assert {"steps", "knee", "fingerprint", "workload", "totals", "chain", "states"} <= set(doc)
    assert (
        "Layout: TP 4 (4 GPUs), GPU count from TP × PP × DP; PP, DP not published (1 each). At the SLO (TTFT p95 <= 2000 ms "
        "and ITL p95 <= 200 ms, concurrency 32): 496.0 output tok/s and 2.5 req/s per GPU, 62.0 output tok/s per user."
    ) in render_markdown(doc, [], None, None).splitlines()
    unknown = ramp([(1, 100.0, 5.0)], None)
    assert unknown["layout"]["gpus_from"] == "assumed" and unknown["per_gpu"]["output_tokens_per_second_at_slo"] == 0.0
    assert "Layout: not published (no TP, PP, DP or GPU read), counted as 1 GPU. No step met the SLO" in render_markdown(
        unknown, [], None, None
    )


def _scaled_of(doc: dict[str, Any]) -> Scaled:
    cap = doc["capacity_at_slo"]
    c = Capacity(cap["concurrency"], cap["requests_per_second"], cap["tokens_per_second"])
    lay = parse_layout(doc["layout"])
    assert lay is not None
    return Scaled(lay, c.tokens_per_second, c.requests_per_second, per_user([c]), (doc["fingerprint"] or {}).get("model"))


def test_the_larger_layout_s_efficiency_against_the_smaller() -> None:
    tp1, tp4 = _scaled_of(ramp(TP1_ROWS, _fp(1.0))), _scaled_of(ramp(TP4_ROWS, _fp(4.0)))
    eff = efficiency(tp4, tp1, "tp1")
    assert eff is not None
    assert eff["ratio"] == pytest.approx(0.62)  # 496 / 800
    assert eff["throughput_ratio"] == pytest.approx(2.48) and eff["gpu_ratio"] == 4.0
    assert eff["requests_ratio"] == pytest.approx(2.5 / 10.0)  # the rows' requests/s do not scale: 10 each
    assert eff["against"]["name"] == "tp1" and eff["against"]["layout"]["gpus"] == 1
    assert eff["text"] == SENTENCE
    assert efficiency(tp1, tp4, "tp4") is None  # only the larger has an efficiency


def test_the_same_layout_has_no_efficiency_and_a_missing_gpu_count_comes_from_the_layout() -> None:
    a, b = _scaled_of(ramp(TP1_ROWS, _fp(4.0))), _scaled_of(ramp(TP4_ROWS, _fp(4.0)))
    assert efficiency(b, a, "a") is None and efficiency(a, b, "b") is None
    # no llm_gpu_info in either record: TP 4 is 4 GPUs, TP 1 one
    tp4 = ramp(TP4_ROWS, _fp(4.0))
    assert tp4["layout"]["gpus"] == 4 and tp4["layout"]["gpus_from"] == "layout" and tp4["layout"]["gpus_seen"] is None
    assert efficiency(_scaled_of(tp4), _scaled_of(ramp(TP1_ROWS, _fp(1.0))), "tp1") is not None


def test_counts_from_two_places_or_two_models_do_not_compare() -> None:
    """A TP 1 engine whose flags are unknown reads the node's eight GPUs; against a TP 4 known from its
    flags that would be a wrong efficiency, so none is given."""
    unknown_on_a_node = _scaled_of(ramp(TP1_ROWS, _fp(None, gpu_count=8)))
    tp4 = _scaled_of(ramp(TP4_ROWS, _fp(4.0)))
    assert unknown_on_a_node.layout.gpus == 8 and unknown_on_a_node.layout.gpus_from == GPUS_FROM_INFO
    assert efficiency(unknown_on_a_node, tp4, "tp4") is None and efficiency(tp4, unknown_on_a_node, "x") is None
    # both counted from llm_gpu_info (two nodes, one engine each): they compare
    two = _scaled_of(ramp(TP4_ROWS, _fp(None, gpu_count=4)))
    one = _scaled_of(ramp(TP1_ROWS, _fp(None, gpu_count=1)))
    eff = efficiency(two, one, "one")
    assert eff is not None and eff["ratio"] == pytest.approx(0.62)
    assert eff["text"] == "4 GPUs gives 0.62 of 1 GPU's per-GPU throughput: 2.5x the throughput for 4x the GPUs"
    assert efficiency(_scaled_of(ramp(TP4_ROWS, _fp(4.0, model="other"))), _scaled_of(ramp(TP1_ROWS, _fp(1.0))), "x") is None
    assert efficiency(_scaled_of(ramp(TP4_ROWS, None)), _scaled_of(ramp(TP1_ROWS, None)), "x") is None  # both assumed


def test_a_smaller_layout_that_met_nothing_gives_no_efficiency_and_the_smallest_is_the_reference() -> None:
    nothing = _scaled_of(ramp([(1, 100.0, 5.0)], _fp(1.0)))
    assert nothing.tokens_per_gpu == 0 and nothing.per_user is None
    assert efficiency(_scaled_of(ramp(TP4_ROWS, _fp(4.0))), nothing, "x") is None
    tp1, tp2, tp4 = (
        _scaled_of(ramp(TP1_ROWS, _fp(1.0))),
        _scaled_of(ramp([(16, 1400.0, 0.5)], _fp(2.0))),
        _scaled_of(ramp(TP4_ROWS, _fp(4.0))),
    )
    found = smallest_against([("tp2", tp2), ("tp4", tp4), ("gone", None), ("tp1", tp1)])
    assert set(found) == {"tp2", "tp4"} and found["tp4"]["against"]["name"] == "tp1"
    assert found["tp2"]["ratio"] == pytest.approx(700 / 800)


def test_per_user_is_the_mean_over_the_repeats_that_met_the_slo() -> None:
    assert per_user([Capacity(8, 1.0, 800.0), Capacity(4, 1.0, 600.0), Capacity(0, 0.0, 0.0)]) == pytest.approx(125.0)
    assert per_user([Capacity(0, 0.0, 0.0)]) is None and per_user([]) is None


# ------------------------------------------------------------------ live: the capacity step's gauge

ENG = {"server": "a", "engine": "vllm", "model": "m", "rank": ""}
GAUGE = "llm_parallel_scaling_efficiency_ratio"
#: the profile: TP 1 measured at 800 tok/s at SLO (800 per GPU)
CAP = {"concurrency": 8, "requests_per_second": 10.0, "tokens_per_second": 800.0}


def _live(tokens_total: float, tp: float | None, gpus: int = 0) -> list[Point]:
    points: list[Point] = [
        Sample("llm_engine_info", {"server": "a", "engine": "vllm", "model": "m", "generation": ""}, 1.0),
        Sample("llm_scheduler_requests_running", ENG, 4.0),
        Sample("llm_generation_tokens_total", ENG, tokens_total),
    ]
    if tp is not None:
        points.append(Sample("llm_engine_setting", {**ENG, "setting": TP}, tp))
    points += [
        Sample("llm_gpu_info", {"gpu": str(i), "uuid": f"GPU-{i}", "name": "H100", "source": "nvml"}, 1.0) for i in range(gpus)
    ]
    return points


def _gauge_over(tmp_path: Path, profile_fp: dict[str, Any] | None, tp: float | None, gpus: int = 0) -> list[float]:
    """The gauge after two snapshots 10 s apart in which the engine generated 4000 tokens (400/s)."""
    doc = tune_doc(CAP, None, **({} if profile_fp is None else {"fingerprint": profile_fp}))
    if profile_fp is None:
        del doc["baseline"]["argv"]  # a profile from before fingerprints
    now = [1795939200.0]
    store = SnapshotStore(clock=lambda: now[0])
    store.register("engine:a", 1.0)
    step = CapacityProfileStep([("a", load_profile(write(tmp_path / "tune.json", doc)))], clock=lambda: now[0])
    out: list[float] = []
    for total in (10_000.0, 14_000.0):
        store.record_success("engine:a", _live(total, tp, gpus), 0.0)
        out += [p.value for p in step.derive(store.snapshot()).points if isinstance(p, Sample) and p.name == GAUGE]
        now[0] += 10.0
    return out


def test_the_live_per_gpu_throughput_against_the_profile_s_smaller_layout(tmp_path: Path) -> None:
    # the engine now runs TP 4 and generates 400 tok/s: 100 per GPU, against 800 per GPU at TP 1
    assert _gauge_over(tmp_path, _fp(1.0), tp=4.0) == [pytest.approx(100.0 / 800.0)]  # one snapshot: no rate yet


def test_the_live_gauge_is_absent_without_a_profile_layout_the_same_layout_or_counts_that_do_not_compare(
    tmp_path: Path,
) -> None:
    assert _gauge_over(tmp_path, _fp(4.0), tp=4.0) == []  # the same layout
    assert _gauge_over(tmp_path, _fp(4.0), tp=1.0) == []  # smaller now than measured: no smaller layout to hold against
    assert _gauge_over(tmp_path, None, tp=4.0) == []  # a profile from before fingerprints
    # the profile knew TP 1 from its flags, the live engine publishes none and the node shows 8 GPUs
    assert _gauge_over(tmp_path, _fp(1.0), tp=None, gpus=8) == []
    # both counted from llm_gpu_info: 1 GPU measured, 4 now
    assert _gauge_over(tmp_path, _fp(None, gpu_count=1), tp=None, gpus=4) == [pytest.approx(100.0 / 800.0)]


def test_scaling_efficiency_arithmetic_without_a_store(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path / "tune.json", tune_doc(CAP, None, fingerprint=_fp(2.0))))
    from exporter.capacity.fingerprint import Fingerprint

    now = Fingerprint("vllm", "m", {TP: 8.0})
    assert scaling_efficiency(profile, LiveLoad(4, 1.0, None, None, 1.0, 1600.0), now) == pytest.approx(200.0 / 400.0)
    assert scaling_efficiency(profile, LiveLoad(4, 1.0, None, None, 1.0, None), now) is None  # no rate yet
    assert scaling_efficiency(profile, LiveLoad(4, 1.0, None, None, 1.0, 1600.0), Fingerprint("vllm", "other", {TP: 8.0})) is None
    assert scaling_efficiency(profile, LiveLoad(4, 1.0, None, None, 1.0, 1600.0), None) is None
    assert Layout().shape == (1, 1, 1, 1)
