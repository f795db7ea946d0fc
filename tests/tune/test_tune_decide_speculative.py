"""Speculative decoding (issue 32): a draft length is changed only where the acceptance the runs measured at
the knee says the tokens cut were mostly rejected; otherwise tune stops with the diagnosis's advice."""

from __future__ import annotations

import json
from typing import Any

import pytest

from exporter.tune.argv import EngineCommand
from exporter.tune.capacity import SLO
from exporter.tune.decide import Decision, decide, measured_acceptance, paying_length, per_token_acceptance
from exporter.tune.knobs import TABLES
from tests.tune.records import report, step

LOW = ("speculative_decoding", "low_acceptance")
SLO_TTFT = SLO(ttft_s=0.5)
ADVICE = TABLES["vllm"]["low_acceptance"].advice.rstrip(".")
NGRAM = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}


def _rate(alpha: float, k: int) -> float:
    """Accepted over drafted tokens when each draft token is kept with ``alpha`` while all before it were."""
    return sum(alpha**i for i in range(1, k + 1)) / k


def _counted(s: dict[str, Any], drafted: float, accepted: float) -> dict[str, Any]:
    s["exporter"]["counters"].update(spec_decode_draft_tokens=drafted, spec_decode_accepted_tokens=accepted)
    return s


def _run(alpha: float, k: int, drafted: float = 2000.0) -> dict[str, Any]:
    """A run whose knee names low acceptance and counts ``drafted`` draft tokens accepted as ``alpha`` gives."""
    early = _counted(step(1, 1.0, 0.1), 2000.0, 2000.0)  # not the knee: its perfect acceptance must not count
    knee = _counted(step(4, 2.0, 2.0, primary=LOW), drafted, drafted * _rate(alpha, k))
    return report([early, knee], knee_index=1, cause=LOW)


def _decide(engine: str, argv: list[str], runs: list[dict[str, Any]], tried: set[str] | None = None) -> Decision:
    return decide(engine, EngineCommand.parse(argv), runs, SLO_TTFT, tried or set())


def _vllm(config: dict[str, Any], flag: str = "--speculative-config") -> list[str]:
    return ["vllm", "serve", "m", flag, json.dumps(config)]


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("alpha", [0.1, 0.35, 0.6, 0.85])
def test_the_per_token_acceptance_is_recovered_from_the_rate(alpha: float, k: int) -> None:
    assert per_token_acceptance(_rate(alpha, k), k) == pytest.approx(alpha, abs=1e-9)


def test_the_positions_kept_are_those_accepted_at_least_half_the_time() -> None:
    assert paying_length(0.8, 5, 0.5) == 3  # 0.8, 0.64, 0.512 | 0.41
    assert paying_length(0.2, 4, 0.5) == 0
    assert paying_length(0.95, 5, 0.5) == 5  # 0.95^5 = 0.77: every configured position pays


def test_the_acceptance_is_read_at_the_knee_and_summed_over_the_runs() -> None:
    runs = [_run(0.8, 5, drafted=1000.0), _run(0.4, 5, drafted=3000.0)]
    acc = measured_acceptance(runs, SLO_TTFT)
    assert acc.drafted == 4000.0
    assert acc.rate == pytest.approx((1000 * _rate(0.8, 5) + 3000 * _rate(0.4, 5)) / 4000)


def test_vllm_drafts_as_many_tokens_as_the_acceptance_pays_for_keeping_the_rest_of_its_config() -> None:
    d = _decide("vllm", _vllm(NGRAM), [_run(0.8, 5)])
    assert (d.cause, d.group, d.stage) == ("low_acceptance", "optimisation", 3)
    assert len(d.changes) == 1 and d.changes[0].flag == "--speculative-config"
    assert json.loads(d.changes[0].new or "") == {**NGRAM, "num_speculative_tokens": 3}
    assert d.cmd is not None and json.loads(d.cmd.get("--speculative-config") or "") == {**NGRAM, "num_speculative_tokens": 3}
    short = _decide("vllm", _vllm(NGRAM, "-sc"), [_run(0.8, 5)])
    assert short.cmd is not None and json.loads(short.cmd.get("-sc") or "")["num_speculative_tokens"] == 3


@pytest.mark.parametrize(
    ("engine", "argv", "alpha", "k", "change"),
    [
        ("vllm", ["vllm", "serve", "m", "--spec-method", "ngram", "--spec-tokens", "5"], 0.8, 5, ("--spec-tokens", "5", "3")),
        (
            "sglang",
            ["python", "-m", "sglang.launch_server", "--speculative-num-steps", "5"],
            0.8,
            5,
            ("--speculative-num-steps", "5", "3"),
        ),
        (
            "llamacpp",
            ["llama-server", "-m", "t.gguf", "-md", "d.gguf", "--spec-draft-n-max", "8"],
            0.7,
            8,
            ("--spec-draft-n-max", "8", "1"),
        ),
        (
            "llamacpp",
            ["llama-server", "-m", "t.gguf", "-md", "d.gguf", "--draft-max", "16"],
            0.85,
            16,
            ("--draft-max", "16", "4"),
        ),
        ("llamacpp", ["llama-server", "-m", "t.gguf", "-md", "d.gguf", "--draft", "16"], 0.85, 16, ("--draft", "16", "4")),
        # the scenario drafts 4 tokens accepted 0.2 each: no position pays, and 0 turns the simulator's drafting off
        (
            "simulator",
            ["llm-layer-exporter", "simulate", "--scenario", "low_spec_acceptance"],
            0.2,
            4,
            ("--spec-tokens", None, "0"),
        ),
    ],
)
def test_each_engine_moves_its_own_draft_length_flag(
    engine: str, argv: list[str], alpha: float, k: int, change: tuple[str, str | None, str]
) -> None:
    d = _decide(engine, argv, [_run(alpha, k)])
    assert [(c.flag, c.old, c.new) for c in d.changes] == [change]


def _stopped(d: Decision, why: str) -> None:
    assert d.cmd is None and d.stop is not None
    assert d.stop.startswith("speculative_decoding/low_acceptance: the tuner has no automatic move for this cause on ")
    assert why in d.stop and d.stop.endswith("; the diagnosis advises: " + ADVICE)


def test_without_acceptance_that_shows_a_gain_no_speculative_setting_is_proposed() -> None:
    _stopped(
        _decide("vllm", _vllm(NGRAM), [_run(0.8, 5, drafted=40.0)]), "(40 draft tokens measured at the knee, fewer than the 50"
    )
    bare = report([step(1, 1.0, 0.1), step(4, 2.0, 2.0, primary=LOW)], knee_index=1, cause=LOW)
    _stopped(_decide("llamacpp", ["llama-server", "-m", "t.gguf", "--spec-draft-n-max", "8"], [bare]), "(0 draft tokens measured")
    _stopped(_decide("vllm", _vllm(NGRAM), [_run(0.95, 5)]), "pays for all 5 draft tokens configured")
    one = ["llama-server", "-m", "t.gguf", "-md", "d.gguf", "--spec-draft-n-max", "1"]
    _stopped(_decide("llamacpp", one, [_run(0.3, 1)]), "pays for 0 of the 1 draft tokens configured and 1 is the fewest")


def test_a_draft_length_the_command_does_not_set_is_not_guessed() -> None:
    _stopped(_decide("vllm", _vllm({"method": "ngram"}), [_run(0.5, 5)]), "sets no draft length the tuner can read")
    _stopped(_decide("vllm", ["vllm", "serve", "m", "--speculative-config", "{not json"], [_run(0.5, 5)]), "no draft length")
    # llama.cpp's default length differs by build (16, then 3): only a length on the command line is moved
    _stopped(
        _decide("llamacpp", ["llama-server", "-m", "t.gguf", "-md", "d.gguf"], [_run(0.5, 3)]), "(--spec-draft-n-max, --draft-max"
    )


def test_a_length_measured_already_is_not_proposed_again() -> None:
    first = _decide("vllm", _vllm(NGRAM), [_run(0.8, 5)])
    assert first.cmd is not None
    _stopped(_decide("vllm", _vllm(NGRAM), [_run(0.8, 5)], {first.key}), "pays for, 3, was measured already")


def test_engines_without_a_draft_length_flag_stop_with_the_advice_whatever_the_acceptance() -> None:
    for engine, argv in (("tgi", ["text-generation-launcher", "--speculate", "4"]), ("trtllm", ["trtllm-serve", "m"])):
        d = _decide(engine, argv, [_run(0.8, 4)])
        assert (
            d.stop
            == f"speculative_decoding/low_acceptance: the tuner has no automatic move for this cause on {engine}; the diagnosis advises: {ADVICE}"
        )
