"""When the exporter gives freed heap back to the OS (exporter/memtrim.py): after a large scrape,
then on scrapes for the hold time, at most once per gap, never on a quiet exporter."""

from __future__ import annotations

from exporter.memtrim import HOLD_S, TrimPolicy, release_free_memory


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def policy(clock: Clock, trims: list[float]) -> TrimPolicy:
    return TrimPolicy(hold_s=60.0, min_gap_s=1.0, clock=clock, trim=lambda: trims.append(clock.now) or True)


def test_a_quiet_exporter_never_trims() -> None:
    clock, trims = Clock(), []
    p = policy(clock, trims)
    for _ in range(100):
        assert p.after_scrape(large=False) is False
        clock.now += 0.5
    assert trims == []


def test_a_large_scrape_trims_then_every_scrape_trims_for_the_hold_at_most_once_a_second() -> None:
    clock, trims = Clock(), []
    p = policy(clock, trims)
    assert p.after_scrape(large=True)
    for _ in range(200):  # a scrape every 0.5 s for 100 s
        clock.now += 0.5
        p.after_scrape(large=False)
    # 50.0, then once a second from 51 to 110 (the hold ends 60 s after the large scrape)
    assert trims[0] == 50.0 and trims[-1] == 110.0
    assert all(b - a >= 1.0 for a, b in zip(trims, trims[1:]))
    assert len(trims) == 61


def test_every_large_scrape_trims_and_restarts_the_hold() -> None:
    clock, trims = Clock(), []
    p = policy(clock, trims)
    p.after_scrape(large=True)
    clock.now += 0.1
    assert p.after_scrape(large=True)  # large ones are not held back by the gap
    clock.now += 30.0
    assert p.after_scrape(large=False)  # 30 s after the second large scrape
    clock.now += 0.5
    assert p.after_scrape(large=False) is False  # within the gap
    clock.now += 29.0
    assert p.after_scrape(large=False)  # 59.5 s after the second (89.6 s after the first)
    clock.now += 1.0
    assert p.after_scrape(large=False) is False  # the hold is over


def test_the_process_policy_holds_past_the_longest_diagnosis_window_and_the_trim_runs_here() -> None:
    assert HOLD_S > 60.0  # the derived sources keep up to 60 s of snapshots
    assert isinstance(release_free_memory(), bool)  # glibc here: a real malloc_trim(0), no error
