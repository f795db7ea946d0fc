"""Issue 23's setting causes on the simulator: launch settings read from its command line, against
the distributions it serves.

Simulator and ``serve`` run as real processes (tests/support/stack.py); the exporter reads the
simulator's launch flags from /proc/PID/cmdline (``--engine-pid``), as it does a real vLLM's, and
the scenario's own load makes the distributions. The eager configuration (``eager_decode``:
``--enforce-eager true``) must name ``cuda_graphs_not_covering_batches``, the long-prompt one with
a small chunk (``long_prompts_small_chunk``: ``--max-num-batched-tokens 128``) must name
``prefill_chunk_too_small``, and the over-reserved one (``over_reserved_context``, dialect llamacpp:
4 slots of 8192 context tokens each, requests under 400) must name ``context_reserved_not_used`` from
the slots and context per slot the simulator's /props and /slots answer, as a real llama-server's.
The healthy scenario, started with settings that fit it (graphs up to 512, a 2048-token budget),
holds none of them; served as llama.cpp (8 slots of 8192, nothing waiting) it holds none either.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from exporter.diagnosis import signals as s
from exporter.simulator.scenarios import SCENARIOS
from tests.support.stack import LoadThread, ProcessStack

pytestmark = [pytest.mark.timeout(600)]

TIME_SCALE = 4.0
SETTING_CAUSES = ("cuda_graphs_not_covering_batches", "prefill_chunk_too_small", "context_reserved_not_used")
#: seconds a cause has to appear (the window must hold enough requests for the length quantiles)
NAME_WITHIN_S = 90.0
QUIET_S = 25.0


@contextmanager
def _running(scenario: str, flags: Sequence[str], dialect: str | None = None) -> Iterator[ProcessStack]:
    """Simulator started with ``flags`` (in the scenario's dialect unless ``dialect``), ``serve``
    watching it, the scenario's own load."""
    load = LoadThread()
    served = dialect or SCENARIOS[scenario].dialect or "vllm"
    with ProcessStack(scenario, sim_args=list(flags), time_scale=TIME_SCALE, dialect=served) as stack:
        load.start(scenario, stack.sim_url, TIME_SCALE)
        try:
            yield stack
        finally:
            load.close()


def _verdict(stack: ProcessStack) -> dict[str, Any]:
    import requests

    r = requests.get(stack.exp_url + "/diagnosis", params={"signals": "1"}, timeout=5)
    r.raise_for_status()
    out: dict[str, Any] = r.json()
    return out


def _story(v: dict[str, Any]) -> str:
    return json.dumps({k: v.get(k) for k in ("state", "holding", "notices")})[:3000]


def _metrics(stack: ProcessStack) -> str:
    import requests

    return requests.get(stack.exp_url + "/metrics", timeout=5).text


def _eager(signals: dict[str, float]) -> None:
    assert signals[s.EAGER] == 1.0 and signals[s.GRAPHS_UNCOVERED] == 1.0
    # launch-bound: SMs mostly idle while the GPU steps (the step rate where the mapping carries
    # one, else NVML "GPU util" at the launch-bound line, as the rule reads it)
    assert signals[s.SM_MAX] < 0.5 and signals[s.RUNNING] >= 1, signals
    pace = signals.get(s.ENGINE_STEPS_RATE)
    assert (pace >= 20) if pace is not None else signals[s.UTIL_MAX] >= 0.2, signals


def _chunks(signals: dict[str, float]) -> None:
    assert signals[s.STEP_BUDGET] == 128
    assert signals[s.PROMPT_P90] >= 4 * 128, signals


def _reserved(signals: dict[str, float]) -> None:
    # the slots and their context as /props answers them: 32768 KV tokens split into 4 slots of 8192
    assert signals[s.RESERVED_CONTEXT] == 8192 and signals[s.SLOTS] == 4, signals
    # every slot busy while requests wait, each holding under 400 of its 8192 tokens (/slots)
    assert signals[s.SLOTS_BUSY_MAX] == 4 and signals[s.WAITING_MAX] >= 1, signals
    assert 0 < signals[s.SLOT_HELD_MAX] <= 256 + 128, signals


@pytest.mark.parametrize(
    ("scenario", "cause", "says", "check", "published"),
    [
        (
            "eager_decode",
            "cuda_graphs_not_covering_batches",
            "CUDA graphs off (enforce_eager)",
            _eager,
            'enforce_eager="true"',
        ),
        (
            "long_prompts_small_chunk",
            "prefill_chunk_too_small",
            "128-token step budget",
            _chunks,
            'setting="max_num_batched_tokens"} 128\n',
        ),
        (
            "over_reserved_context",
            "context_reserved_not_used",
            "each slot reserves 8192 context tokens",
            _reserved,
            'setting="context_per_slot"} 8192\n',
        ),
    ],
)
def test_each_configuration_names_its_cause(scenario: str, cause: str, says: str, check: Any, published: str) -> None:
    flags = SCENARIOS[scenario].launch
    with _running(scenario, flags) as stack:
        deadline = time.monotonic() + NAME_WITHIN_S
        v = _verdict(stack)
        while cause not in (v.get("holding") or []) and time.monotonic() < deadline:
            time.sleep(0.5)
            v = _verdict(stack)
        assert cause in (v.get("holding") or []), _story(v)
        check(v["signals"])  # for the reason the issue gives, read from the engine and its distributions
        found = [c for c in v["bottlenecks"] if c["cause"] == cause]
        if found:  # reported (a symptom it explains, or a warning): its link of the chain says why
            assert says in found[0]["chain"], found
        # the setting it read, published as the engine's own
        assert published in _metrics(stack).replace(".0\n", "\n")


def _quiet_verdicts(stack: ProcessStack, judged: str) -> list[dict[str, Any]]:
    """The distinct verdicts of ``QUIET_S`` seconds, once the signal ``judged`` is read (bounded waits)."""
    deadline = time.monotonic() + 20
    while judged not in _verdict(stack).get("signals", {}) and time.monotonic() < deadline:
        time.sleep(0.5)
    seen: list[dict[str, Any]] = []
    end = time.monotonic() + QUIET_S
    while time.monotonic() < end:
        v = _verdict(stack)
        if not seen or v["timestamp"] != seen[-1]["timestamp"]:
            seen.append(v)
        time.sleep(0.5)
    assert len(seen) >= QUIET_S / 2
    return seen


def test_the_healthy_scenario_with_fitting_settings_holds_none_of_them() -> None:
    flags = ["--max-cudagraph-capture-size", "512", "--max-num-batched-tokens", "2048"]
    with _running("healthy", flags) as stack:
        seen = _quiet_verdicts(stack, s.GRAPHS_UNCOVERED)
        loud = [v for v in seen if set(v.get("holding") or []) & set(SETTING_CAUSES)]
        assert not loud, _story(loud[0])
        # judged, not merely unknown: the settings were read and compared
        last = seen[-1].get("signals", {})
        assert last.get(s.GRAPHS_UNCOVERED) == 0.0 and last.get(s.STEP_BUDGET) == 2048, last


def test_the_healthy_scenario_served_as_llamacpp_does_not_name_reserved_context() -> None:
    """Each of the 8 slots reserves 8192 tokens, several times what the requests use, but the requests
    do not wait for a slot: the reservation costs nothing yet, so the cause stays quiet (judged on the
    slots, context per slot and held context read from /props and /slots)."""
    with _running("healthy", [], dialect="llamacpp") as stack:
        seen = _quiet_verdicts(stack, s.SLOT_HELD_MAX)
        loud = [v for v in seen if "context_reserved_not_used" in (v.get("holding") or [])]
        assert not loud, _story(loud[0])
        last = seen[-1].get("signals", {})
        assert last.get(s.RESERVED_CONTEXT) == 8192 and last.get(s.SLOTS) == 8, last
        # what a busy slot held, read from /slots: within what the healthy load sends (1024 + 96 at most)
        assert 0 < last[s.SLOT_HELD_MAX] <= 1024 + 96, last
