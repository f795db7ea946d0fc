"""The fourth stop kind (no move for this cause on this engine) and the moves issue 32 adds: for every engine
and cause, the sentence tune stops with never contradicts the diagnosis's advice (exporter/diagnosis/rules.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from exporter.diagnosis.rules import RULES, Rule
from exporter.engines import settings
from exporter.tune.argv import EngineCommand
from exporter.tune.capacity import SLO
from exporter.tune.decide import Decision, decide
from exporter.tune.knobs import (
    DRAFT,
    ENGINES,
    HARDWARE_STOP,
    LIMITS,
    NO_MOVE,
    QUOTE_GAP,
    STOPS,
    TABLES,
    Knob,
    no_move_stop,
    stop_sentence,
)
from tests.tune.records import report, step

#: how the diagnosis's advice names each engine -> the knob tables' engine
LABELS = {"vLLM": "vllm", "SGLang": "sglang", "TGI": "tgi", "trtllm-serve": "trtllm", "llama.cpp": "llamacpp"}
#: the causes where "no flag will help — scale out" is the truth: the GPU at its compute, bandwidth or power limit
GPU_AT_ITS_LIMIT = {"compute_bound", "memory_bandwidth_bound", "power_or_thermal_throttling"}
NO_FLAG = "no flag will help"
#: each engine started with nothing but its model: the tables' defaults decide
BARE = {
    "vllm": ["vllm", "serve", "m"],
    "sglang": ["python", "-m", "sglang.launch_server", "--model-path", "m"],
    "tgi": ["text-generation-launcher", "--model-id", "m"],
    "trtllm": ["trtllm-serve", "m"],
    "llamacpp": ["llama-server", "-m", "m.gguf"],
    "simulator": ["llm-layer-exporter", "simulate"],
}
SLO_TTFT = SLO(ttft_s=0.5)


def _ramp(layer: str, cause: str) -> dict[str, Any]:
    """A run whose knee names ``cause`` as its primary."""
    return report([step(1, 1.0, 0.1), step(4, 2.0, 2.0, primary=(layer, cause))], knee_index=1, cause=(layer, cause))


def _decide(engine: str, argv: list[str], layer: str, cause: str) -> Decision:
    return decide(engine, EngineCommand.parse(argv), [_ramp(layer, cause)], SLO_TTFT, set())


def _flags(text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])-{1,2}[A-Za-z][\w-]*", text))


def _named_flags(advice: str) -> list[tuple[str, set[str]]]:
    """(engine, flags) for every clause of the advice that starts with an engine's name and names flags:
    "TGI: --cuda-graphs with sizes" -> ("tgi", {"--cuda-graphs"})."""
    out = []
    for clause in re.split(r"[();,]", advice):
        words = clause.strip().split(maxsplit=1)
        if words and words[0].rstrip(":") in LABELS and _flags(clause):
            out.append((LABELS[words[0].rstrip(":")], _flags(clause)))
    return out


def _engine_vocabulary() -> set[str]:
    """Every word by which an advice names an engine setting: the engines' names, their flags (the runtime's
    flag table and every move of the knob tables) and the runtime's setting names (enforce_eager)."""
    words = set(LABELS)
    for flags in settings.FLAGS.values():
        for flag in flags:
            words |= set(flag.spellings)
            words |= {flag.setting} if "_" in flag.setting else set()
    for table in TABLES.values():
        words |= {m.flag for knob in table.values() for m in knob.moves if not m.env}
    return words


def _names(advice: str, word: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", advice) is not None


def _quoted_in_order(quote: str, advice: str) -> bool:
    """Each fragment of the quote is the advice's own text, in the advice's order."""
    at = 0
    for fragment in quote.split(QUOTE_GAP):
        found = advice.find(fragment, at)
        if not fragment or found < 0:
            return False
        at = found + len(fragment)
    return True


@pytest.mark.parametrize("engine", ENGINES)
def test_no_stop_sentence_contradicts_the_diagnosis_advice(engine: str) -> None:
    """The stop tune ends with on a bare command, for every cause the diagnosis names: "no flag will help"
    only where the advice names no flag, setting or engine; a flag the advice names for this engine is moved
    by the table or named in the stop."""
    vocabulary = _engine_vocabulary()
    for rule in RULES:
        d = _decide(engine, BARE[engine], rule.layer, rule.cause)
        said = d.stop or ""
        if NO_FLAG in said:
            named = sorted(w for w in vocabulary if _names(rule.advice, w))
            assert not named, f"{engine}/{rule.cause}: the stop says {NO_FLAG!r}, the advice names {named}"
        moved = {m.flag for m in TABLES[engine][rule.cause].moves}
        for named_for, flags in _named_flags(rule.advice):
            if named_for == engine:
                assert moved & flags or any(f in said for f in flags), f"{engine}/{rule.cause}: advice names {flags}"


def test_the_hardware_limit_stop_is_kept_for_the_gpu_at_its_limit_only() -> None:
    hardware = {cause for table in TABLES.values() for cause, knob in table.items() if knob.limit == "hardware"}
    assert hardware == GPU_AT_ITS_LIMIT
    for engine in ENGINES:
        assert all(TABLES[engine][cause].limit == "hardware" for cause in GPU_AT_ITS_LIMIT)


def _quoting_entries() -> list[Any]:
    """Every entry whose stop quotes the advice: the no-move ones, and those whose moves the acceptance gates."""
    rules = {r.cause: r for r in RULES}
    return [
        pytest.param(engine, rules[cause], knob, id=f"{engine}-{cause}")
        for engine, table in TABLES.items()
        for cause, knob in table.items()
        if cause in rules and (knob.limit == NO_MOVE or any(m.op == DRAFT for m in knob.moves))
    ]


@pytest.mark.parametrize(("engine", "rule", "knob"), _quoting_entries())
def test_a_no_move_stop_quotes_the_diagnosis_advice_for_that_engine(engine: str, rule: Rule, knob: Knob) -> None:
    assert knob.advice and _quoted_in_order(knob.advice, rule.advice), f"{engine}/{rule.cause}: {knob.advice!r}"
    for other, flags in _named_flags(rule.advice):  # what the advice says of another engine is left out
        assert other == engine or not flags & _flags(knob.advice), (engine, rule.cause, other)
    sentence = no_move_stop(engine, knob.advice) if knob.limit is None else stop_sentence(engine, knob)
    assert f"no automatic move for this cause on {engine}" in sentence
    assert sentence.endswith(knob.advice.rstrip(".")) and NO_FLAG not in sentence


def test_the_fourth_kind_is_added_to_the_three_and_leaves_their_sentences() -> None:
    assert LIMITS == ("hardware", "capacity", "outage", NO_MOVE)
    assert STOPS["hardware"] == HARDWARE_STOP == "the engine runs at its hardware limit; no flag will help — scale out"
    assert set(STOPS) == {"hardware", "capacity", "outage"}
    assert (
        no_move_stop("tgi", "Do this.", "why")
        == "the tuner has no automatic move for this cause on tgi (why); the diagnosis advises: Do this"
    )


def test_causes_filed_as_hardware_limits_before_now_stop_with_the_advice() -> None:
    """Issue 32's five, on engines still without a move for them: the advice, not "scale out"."""
    for engine, cause in (
        ("trtllm", "launch_bound_small_kernels"),
        ("trtllm", "cuda_graphs_not_covering_batches"),
        ("trtllm", "serial_host_ceiling"),
        ("tgi", "low_acceptance"),
        ("sglang", "pcie_transfer_bound"),
    ):
        layer = next(r.layer for r in RULES if r.cause == cause)
        d = _decide(engine, BARE[engine], layer, cause)
        assert d.cmd is None and d.stop is not None and HARDWARE_STOP not in d.stop, (engine, cause)
        assert d.stop.startswith(f"{layer}/{cause}: the tuner has no automatic move for this cause on {engine}; ")


G32 = "1,2,4,8,16,32"


def test_tgi_turns_graphs_on_then_captures_larger_batches_and_never_shrinks_a_list() -> None:
    tgi = BARE["tgi"]
    graphs = ("operator", "cuda_graphs_not_covering_batches")
    d = _decide("tgi", [*tgi, "--cuda-graphs", "0"], *graphs)
    assert [c.as_dict() for c in d.changes] == [{"flag": "--cuda-graphs", "from": "0", "to": G32}]
    assert _decide("tgi", tgi, *graphs).changes[0].new == G32 + ",64"  # absent: TGI's default list, doubled
    assert _decide("tgi", [*tgi, "--cuda-graphs", G32 + ",64"], *graphs).changes[0].new == G32 + ",64,128"
    wide = _decide("tgi", [*tgi, "--cuda-graphs", G32 + ",64,128,256,512"], *graphs)
    assert wide.cmd is None and wide.stop == f"{'/'.join(graphs)}: every tgi move for it was tried or is at its bound"
    launch = _decide("tgi", [*tgi, "--cuda-graphs", "0"], "operator", "launch_bound_small_kernels")
    assert launch.changes[0].new == G32 and launch.group == "optimisation"
    host = _decide("tgi", [*tgi, "--cuda-graphs=0"], "scheduler", "serial_host_ceiling")
    assert host.cmd is not None and "--cuda-graphs=" + G32 in host.cmd.argv


def test_api_server_processes_and_host_threads_where_the_engine_has_them() -> None:
    sg = BARE["sglang"]
    front = _decide("sglang", sg, "application", "front_end_overhead")
    assert [c.as_dict() for c in front.changes] == [{"flag": "--tokenizer-worker-num", "from": None, "to": "2"}]
    host = _decide(
        "sglang", [*sg, "--disable-overlap-schedule", "--tokenizer-worker-num", "2"], "scheduler", "serial_host_ceiling"
    )
    assert [c.as_dict() for c in host.changes] == [{"flag": "--disable-overlap-schedule", "from": "on", "to": None}]
    assert host.group == "strategy"
    tgi = _decide("tgi", BARE["tgi"], "application", "front_end_overhead")
    assert [c.as_dict() for c in tgi.changes] == [{"flag": "--validation-workers", "from": None, "to": "4"}]


def test_the_simulator_turns_graphs_on_for_launch_bound_kernels() -> None:
    d = _decide("simulator", [*BARE["simulator"], "--enforce-eager", "true"], "operator", "launch_bound_small_kernels")
    assert [c.as_dict() for c in d.changes] == [{"flag": "--enforce-eager", "from": "true", "to": "false"}]
