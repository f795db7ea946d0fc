"""The capacity profile file as hostile input: FIFOs, devices, size, nesting, huge numbers, wrong types.

Each case is one ``ProfileError`` line (a ``UsageError`` line, exit status 2, at start-up) and,
while serving, the last good profile stays published with the reason counted. A FIFO must never
block: every call that could is run on a helper thread that the test unblocks (by opening the
FIFO for writing) if it hangs, so a regression fails here instead of hanging the suite.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from exporter.capacity import watch as watch_module
from exporter.capacity.profile import MAX_BYTES, ProfileError, ProfileFile, load_profile, parse_profile, read_file
from exporter.capacity.source import CapacityProfileStep
from exporter.errors import UsageError
from exporter.samples import Sample, SampleResult
from exporter.store import SnapshotStore
from tests.capacity.profiles import FINGERPRINT, ramp_report, tune_doc, write
from tests.capacity.test_capacity_config import _load

CAP = {"concurrency": 10, "requests_per_second": 2.0, "tokens_per_second": 200.0}
ENGINE = "http://127.0.0.1:9/metrics"
T = TypeVar("T")


def _never_blocked(call: Callable[[], T], fifo: Path) -> T:
    """``call()`` on a helper thread; a call stuck opening ``fifo`` is unblocked and fails the test."""
    out: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as err:  # handed to the test's thread
            failed.append(err)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(10.0)  # far past a stat and a refusal; only a blocked open() gets here
    if worker.is_alive():
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # a reader is waiting: this releases it
        os.close(fd)
        worker.join(10.0)
        pytest.fail(f"the loader blocked opening the FIFO {fifo}")
    if failed:
        raise failed[0]
    return out[0]


def _refused(path: Path) -> ProfileError:
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    text = str(err.value)
    assert "\n" not in text and str(path) in text and len(text) < 400, text
    return err.value


def _deep(levels: int) -> str:
    return '{"baseline": ' + "[" * levels + "]" * levels + ', "trials": []}'


def _tune(**capacity: Any) -> str:
    return json.dumps(tune_doc({**CAP, **capacity}))


# ------------------------------------------------------------------ the loader


def test_a_fifo_is_refused_from_its_stat_never_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "tune.json"
    os.mkfifo(fifo)
    err = _never_blocked(lambda: pytest.raises(ProfileError, load_profile, fifo).value, fifo)
    assert "is a FIFO, expected a tune.json or report.json file" in str(err) and err.reason == "malformed"


def test_a_device_and_a_directory_are_refused(tmp_path: Path) -> None:
    assert "is a device" in str(_refused(Path(os.devnull)))
    assert "is a directory" in str(_refused(tmp_path))


def test_a_file_over_the_cap_is_refused_from_its_size(tmp_path: Path) -> None:
    big = tmp_path / "tune.json"
    with open(big, "wb") as fh:
        fh.truncate(16 * MAX_BYTES)  # sparse: its size says 64 MiB, nothing of it need be read
    err = _refused(big)
    assert err.reason == "too_large" and f"over the {MAX_BYTES >> 20} MiB" in str(err)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (_deep(100_000), "nested deeper than 64 levels"),
        (_deep(65), "nested deeper than 64 levels"),
        (_tune(concurrency=10**400), "capacity.concurrency is over 1000000 (an integer of"),
        (_tune(concurrency=10**7), "capacity.concurrency is over 1000000 (10000000)"),
        (_tune(requests_per_second=10**400), "capacity.requests_per_second is not a number from 0 to 1e+12"),
        (_tune().replace('"tokens_per_second": 200.0', '"tokens_per_second": 1e400'), "capacity.tokens_per_second"),
        (_tune().replace('"concurrency": 10', '"concurrency": ' + "9" * 5000), "not JSON (Exceeds the limit"),
        (_tune().replace('"tokens_per_second": 200.0', '"tokens_per_second": NaN'), "not JSON (NaN is not JSON)"),
        (json.dumps(tune_doc(CAP, runs=5)), "runs: expected a list of ramp records, got int"),
        (json.dumps(tune_doc(CAP, runs="x")), "runs: expected a list of ramp records, got str"),
        (
            json.dumps(tune_doc(CAP, fingerprint={**FINGERPRINT, "settings": {"slots": 10**400}})),
            "fingerprint.settings.slots: expected a number within",
        ),
        (
            json.dumps(tune_doc(CAP, workload={"prompt_tokens_mean": 10**400})),
            "workload.prompt_tokens_mean is over 1e+09",
        ),
        (json.dumps({"steps": [5]}), "report.json steps are garbled"),
        (json.dumps({"steps": [{"concurrency": 1, "client": [1]}]}), "report.json steps are garbled"),
    ],
    ids=[
        "deep-100k",
        "deep-65",
        "concurrency-400-digits",
        "concurrency-10M",
        "rps-400-digits",
        "tps-1e400",
        "int-5000-digits",
        "nan",
        "runs-int",
        "runs-str",
        "setting-400-digits",
        "workload-400-digits",
        "ramp-step-int",
        "ramp-client-list",
    ],
)
def test_hostile_content_is_one_line_naming_the_file(tmp_path: Path, content: str, why: str) -> None:
    path = tmp_path / "profile.json"
    path.write_text(content)
    assert why in str(_refused(path))


def test_a_ramp_step_past_the_ranges_is_refused(tmp_path: Path) -> None:
    doc = ramp_report()
    for step in doc["steps"]:
        step["concurrency"] = 10**400
    assert "the step at SLO: capacity.concurrency is over 1000000" in str(_refused(write(tmp_path / "r.json", doc)))


def test_at_start_up_each_is_one_usage_line(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.json"
    deep.write_text(_deep(100_000))
    runs = write(tmp_path / "runs.json", tune_doc(CAP, runs=5))
    digits = tmp_path / "digits.json"
    digits.write_text(json.dumps(tune_doc(CAP, fingerprint={"settings": {"slots": int("9" * 400)}})))
    for path in (fifo, deep, runs, digits):
        argv = ["--engine", ENGINE, "--capacity-profile", str(path)]
        with pytest.raises(UsageError) as err:
            _never_blocked(lambda: _load(argv), fifo)  # noqa: B023 - called before the loop moves on
        text = str(err.value)
        assert text.startswith(f"--capacity-profile: capacity profile {path}: ") and "\n" not in text, text


# ------------------------------------------------------------------ while serving


def _step(tmp_path: Path) -> tuple[SnapshotStore, CapacityProfileStep, Path]:
    path = write(tmp_path / "tune.json", tune_doc(CAP))
    store = SnapshotStore()
    return store, CapacityProfileStep([("a", load_profile(path))]), path


def _concurrency(result: SampleResult) -> float:
    (value,) = [p.value for p in result.points if isinstance(p, Sample) and p.name == "llm_capacity_concurrency_at_slo"]
    return value


def _replace_with(path: Path, make: Callable[[Path], object]) -> None:
    """Swap ``path`` for what ``make`` creates (a rename, as an operator or an attacker would)."""
    other = path.with_name("incoming")
    make(other)
    os.replace(other, path)


def test_a_bad_file_later_keeps_the_last_good_profile_and_says_why(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store, src, path = _step(tmp_path)
    assert _concurrency(src.derive(store.snapshot())) == 10
    caplog.set_level(logging.WARNING)

    def sparse(p: Path) -> None:
        with open(p, "wb") as fh:
            fh.truncate(2 * MAX_BYTES)

    cases: list[tuple[Callable[[Path], object], str, str]] = [
        (lambda p: os.mkfifo(p), "malformed", "is a FIFO"),
        (sparse, "too_large", "over the 4 MiB"),
        (lambda p: p.write_text(_deep(100_000)), "malformed", "nested deeper than 64 levels"),
        (lambda p: p.write_text(_tune(concurrency=10**400)), "malformed", "capacity.concurrency is over"),
        (lambda p: write(p, tune_doc(CAP, runs=5)), "malformed", "runs: expected a list"),
    ]
    for make, reason, why in cases:
        _replace_with(path, make)
        result = _never_blocked(lambda: src.derive(store.snapshot()), path)
        assert [(e.reason, why in e.message) for e in result.partial_errors] == [(reason, True)], result.partial_errors
        assert _concurrency(result) == 10  # the last good profile, every series still there
        assert len(result.points) >= 5
    warned = [r.getMessage() for r in caplog.records if "keeping the last good profile" in r.getMessage()]
    assert len(warned) == len(cases) and all("\n" not in m for m in warned)
    _replace_with(path, lambda p: write(p, tune_doc({**CAP, "concurrency": 12})))
    result = src.derive(store.snapshot())
    assert result.partial_errors == [] and _concurrency(result) == 12


def test_the_file_is_decoded_at_most_once_per_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, src, path = _step(tmp_path)
    reads: list[str] = []
    decodes: list[str] = []
    real_read, real_parse = read_file, parse_profile

    def read(where: str) -> ProfileFile:
        reads.append(where)
        return real_read(where)

    def parse(where: str, file: ProfileFile, slo: Any = None) -> Any:
        decodes.append(where)
        return real_parse(where, file, slo)

    monkeypatch.setattr(watch_module, "read_file", read)
    monkeypatch.setattr(watch_module, "parse_profile", parse)
    for _ in range(3):
        src.derive(store.snapshot())
    assert reads == decodes == []  # unchanged since start-up: a stat per pass, nothing read
    _replace_with(path, lambda p: p.write_text(_deep(100)))
    for _ in range(3):
        assert [e.reason for e in src.derive(store.snapshot()).partial_errors] == ["malformed"]
    assert len(reads) == len(decodes) == 1  # a bad file stays bad until it changes again: read once
    write(path, tune_doc({**CAP, "concurrency": 16}))
    for _ in range(3):
        assert _concurrency(src.derive(store.snapshot())) == 16
    assert len(reads) == len(decodes) == 2
    for i in range(3):  # touched with the same bytes: read and hashed, never decoded again
        os.utime(path, ns=(i * 10**9, i * 10**9))
        result = src.derive(store.snapshot())
        assert result.partial_errors == [] and _concurrency(result) == 16
    assert len(reads) == 5 and len(decodes) == 2
