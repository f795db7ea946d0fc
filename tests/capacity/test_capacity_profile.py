"""Capacity profiles: tune.json and ramp report.json into one Profile, and every way a file can be unusable."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from exporter.capacity.atslo import SLO
from exporter.capacity.fingerprint import Fingerprint, differences, from_series, parse
from exporter.capacity.profile import ProfileError, load_profile
from exporter.tune.record import _config
from tests.capacity.profiles import FINGERPRINT, ramp_report, tune_doc, write

CAP = {"concurrency": 8, "requests_per_second": 3.1, "tokens_per_second": 420.0}
BEST = {"concurrency": 12, "requests_per_second": 4.4, "tokens_per_second": 610.0}


def test_tune_json_recommendation_wins_over_the_baseline(tmp_path: Path) -> None:
    rec = {
        "argv": ["llama-server", "-np", "6"],
        "capacity": BEST,
        "fingerprint": {**FINGERPRINT, "settings": {"slots": 6}},
        "workload": {"prompt_tokens_mean": 500.0, "output_tokens_mean": 60.0},
    }
    p = load_profile(write(tmp_path / "tune.json", tune_doc(CAP, rec)))
    assert (p.kind, p.concurrency, p.requests_per_second, p.tokens_per_second) == ("tune.json recommendation", 12, 4.4, 610.0)
    assert p.fingerprint is not None and p.fingerprint.settings["slots"] == 6.0 and p.fingerprint.model == "tiny"
    assert (p.prompt_tokens_mean, p.output_tokens_mean) == (500.0, 60.0)
    assert p.measured_at == 1795939200.0  # 2026-11-29T08:00:00Z


def test_tune_json_without_recommendation_uses_the_baseline(tmp_path: Path) -> None:
    p = load_profile(write(tmp_path / "tune.json", tune_doc(CAP, None, fingerprint=FINGERPRINT)))
    assert (p.kind, p.concurrency) == ("tune.json baseline", 8)
    assert p.fingerprint is not None and p.fingerprint.settings == {"slots": 4.0, "context_per_slot": 512.0}


def test_old_tune_json_without_fingerprint_compares_what_its_command_line_writes(tmp_path: Path) -> None:
    p = load_profile(write(tmp_path / "tune.json", tune_doc(CAP)))  # no fingerprint, no workload
    assert p.fingerprint is not None and p.fingerprint.settings == {"slots": 4.0}
    assert p.prompt_tokens_mean is None and p.output_tokens_mean is None
    doc = tune_doc(CAP)
    del doc["baseline"]["argv"]
    bare = load_profile(write(tmp_path / "old.json", doc))
    assert bare.fingerprint is None  # staleness unknown


def test_ramp_report_capacity_is_the_highest_step_within_the_slo(tmp_path: Path) -> None:
    path = write(tmp_path / "report.json", ramp_report())
    p = load_profile(path)  # default SLO: TTFT p95 2 s, ITL p95 200 ms
    assert (p.kind, p.concurrency, p.requests_per_second, p.tokens_per_second) == ("ramp report.json", 8, 10.0, 300.0)
    assert p.prompt_tokens_mean == 512.0 and p.output_tokens_mean == 64.0  # the engine's counts
    assert p.fingerprint == parse(FINGERPRINT, "x")
    assert load_profile(path, SLO(0.3, None)).concurrency == 4  # a tighter SLO: a lower knee


def test_ramp_report_from_before_fingerprints_loads(tmp_path: Path) -> None:
    doc = ramp_report(fingerprint=None)
    del doc["fingerprint"], doc["workload"]
    p = load_profile(write(tmp_path / "report.json", doc))
    assert p.fingerprint is None and p.prompt_tokens_mean is None and p.concurrency == 8


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "no such file"),
        ("{not json", "not JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"hello": 1}', "neither a tune.json (baseline, trials) nor a ramp report.json (steps)"),
        (
            json.dumps(tune_doc({"concurrency": 0, "requests_per_second": 0, "tokens_per_second": 0})),
            "no configuration met the SLO",
        ),
        (json.dumps(tune_doc({**CAP, "requests_per_second": "fast"})), "capacity.requests_per_second is not a number"),
        (json.dumps(tune_doc(CAP, None, fingerprint={"settings": [1]})), "fingerprint.settings: expected an object"),
        (json.dumps({"steps": [{"concurrency": 1, "client": {"requests": 0}}]}), "no step of the ramp met the SLO"),
        (
            json.dumps({"steps": [{"client": {"requests": 5, "ttft_s": {"p95": 0.1}, "itl_s": {"p95": 0.01}}}]}),
            "report.json steps are garbled",
        ),
    ],
)
def test_unusable_files_are_one_line_naming_the_file(tmp_path: Path, content: str | None, why: str) -> None:
    path = tmp_path / "profile.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    text = str(err.value)
    assert "\n" not in text and str(path) in text and why in text, text


def test_a_directory_is_not_a_profile(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="is a directory"):
        load_profile(tmp_path)


def test_fingerprint_differences_compare_only_what_both_sides_know() -> None:
    measured = Fingerprint("llamacpp", "tiny", {"slots": 4.0, "context_per_slot": 512.0})
    assert differences(measured, Fingerprint("llamacpp", "tiny", {"slots": 4.0})) == []
    assert differences(measured, Fingerprint("llamacpp", None, {"slots": 2.0, "kv_cache_dtype": "q8_0"})) == ["slots 4 -> 2"]
    assert differences(measured, Fingerprint("llamacpp", "other", {})) == ["model tiny -> other"]


def test_fingerprint_from_an_exposition_scrape() -> None:
    eng = {"server": "s", "engine": "vllm", "model": "m", "rank": "0"}
    scrape = {
        "llm_engine_info": [({"server": "s", "engine": "vllm", "model": "m", "generation": "v1"}, 1.0)],
        "llm_engine_setting": [({**eng, "setting": "max_num_seqs"}, 64.0), ({**eng, "setting": "bogus"}, 1.0)],
        "llm_engine_config_info": [({**eng, "block_size": "16", "kv_cache_dtype": "auto", "enforce_eager": ""}, 1.0)],
    }
    fp = from_series(scrape)
    assert fp == Fingerprint("vllm", "m", {"max_num_seqs": 64.0, "block_size": "16", "kv_cache_dtype": "auto"})
    two = {**scrape, "llm_engine_info": [*scrape["llm_engine_info"], ({"server": "t"}, 1.0)]}
    assert from_series(two) is None  # two engines: which one a ramp measured cannot be told
    assert from_series(two, "s") == fp


def test_tune_record_keeps_the_fingerprint_workload_and_command_line() -> None:
    from exporter.tune.argv import EngineCommand
    from exporter.tune.session import Measurement

    run = ramp_report()
    m = Measurement("baseline", EngineCommand.parse(["llama-server", "-m", "x.gguf", "-np", "4"], "llamacpp"), runs=[run, run])
    cfg = _config(m, SLO(2.0, 0.2))
    assert cfg["argv"] == cfg["fingerprint"]["argv"] == ["llama-server", "-m", "x.gguf", "-np", "4"]
    assert cfg["fingerprint"]["settings"] == FINGERPRINT["settings"]
    assert cfg["workload"] == {"prompt_tokens_mean": 512.0, "output_tokens_mean": 64.0, "source": "engine"}
    assert cfg["capacity"] == {"concurrency": 8, "requests_per_second": 10.0, "tokens_per_second": 300.0}


def test_mtime_is_the_measurement_time_when_a_file_says_none(tmp_path: Path) -> None:
    doc = tune_doc(CAP)
    del doc["generated_at"]
    path = write(tmp_path / "tune.json", doc)
    os.utime(path, (1_700_000_000, 1_700_000_000))
    assert load_profile(path).measured_at == 1_700_000_000
