"""The simulator's eager decode (issue 23): graphs off, or a batch above the largest captured graph,
adds kernel-launch gaps to each decode step, read as the recorded host-bound tiny-kernels phase."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.simulator import calibration as cal
from exporter.simulator.engine import eager_launch_s
from exporter.simulator.roofline import GpuParams, StepWork, step_cost
from exporter.simulator.scenarios import SCENARIOS
from exporter.simulator.settings import SimConfig, apply_overrides


def _decode(seqs: int, prefill: int = 0) -> StepWork:
    return StepWork(prefill_tokens=prefill, decode_tokens=seqs, decode_seqs=seqs, kv_read_tokens=seqs * 700)


@pytest.mark.parametrize(
    ("overrides", "work", "gap"),
    [
        ({}, _decode(16), 0.0),  # graphs cover a batch of 16
        ({"enforce_eager": True}, _decode(16), 0.004),  # graphs off
        ({"max_cudagraph_capture_size": 8}, _decode(16), 0.004),  # above the largest captured graph
        ({"enforce_eager": True}, _decode(16, prefill=512), 0.0),  # a mixed step: not a captured decode
        ({"enforce_eager": True, "eager_launch_s": 0.01}, _decode(4), 0.01),
    ],
)
def test_which_steps_run_eager(overrides: dict[str, Any], work: StepWork, gap: float) -> None:
    assert eager_launch_s(apply_overrides(SimConfig(), overrides), work) == gap


def test_an_eager_step_is_longer_with_the_sms_mostly_idle() -> None:
    graphs = step_cost(_decode(16), GpuParams())[0]
    work = _decode(16)
    work.eager_launch_s = 0.004
    eager = step_cost(work, GpuParams())[0]
    assert eager.kernel_s == pytest.approx(graphs.kernel_s + 0.004)
    share = 0.004 / eager.kernel_s
    want_sm = (1 - share) * graphs.kernel_profile["sm_util"] + share * cal.TINY.sm_util
    assert eager.kernel_profile["sm_util"] == pytest.approx(want_sm)
    assert eager.kernel_profile["sm_util"] < 50 < graphs.kernel_profile["sm_util"]  # the rule's line, in percent
    assert eager.kernel_power_w < graphs.kernel_power_w


def test_the_launch_scenarios_state_their_flags_as_settings() -> None:
    assert SCENARIOS["eager_decode"].launch_settings() == {"enforce_eager": "true"}
    cfg = apply_overrides(SCENARIOS["long_prompts_small_chunk"].config(), SCENARIOS["long_prompts_small_chunk"].launch_settings())
    assert cfg.max_num_batched_tokens == 128 and cfg.max_model_len == 16384
    assert SCENARIOS["healthy"].launch == ()
