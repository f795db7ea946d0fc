"""A named closed-loop client has no think time in model time, however late it comes back in wall time.

The ledger and the clock are driven with fake wall clocks; the engine test runs the real
scheduler thread in-process with a named client that comes back 0.3 s (wall) after each
answer, and reads model time only: each request arrives at the model time the previous
one finished. (An unnamed client is not compared: when the engine goes idle relative to
the client's timer depends on the host, so its gap has no bound a test could hold.) The
ledger's forget window is set far beyond the delay, so a starved host that fires the
client's timer late still finds it awaited.
"""

from __future__ import annotations

import threading
from typing import Any

from exporter.simulator.clock import SimClock
from exporter.simulator.engine import Engine
from exporter.simulator.lockstep import MAX_CLIENTS, ClientLedger, client_id
from exporter.simulator.requests import SimRequest, TokenEvent
from exporter.simulator.settings import SimConfig


class Wall:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_answered_client_is_awaited_until_it_returns_or_is_forgotten() -> None:
    wall = Wall()
    ledger = ClientLedger(forget_after_s=0.5, wall=wall)
    assert ledger.awaited() == 0
    ledger.arrived("a", "r1")
    ledger.arrived("b", "r2")
    assert ledger.awaited() == 0  # both inside the engine
    ledger.answered("a", "r1")
    assert ledger.awaited() == 1
    ledger.arrived("a", "r3")  # back with its next request
    assert ledger.awaited() == 0
    ledger.answered("b", "r2")
    assert ledger.wait_s() == 0.5  # the engine sleeps until b's forget deadline unless b's request wakes it
    wall.now += 0.4
    assert abs(ledger.wait_s() - 0.1) < 1e-9
    wall.now += 0.2  # b never came back (its load was retired): forgotten, not waited for forever
    assert ledger.awaited() == 0 and ledger.wait_s() == 0.0


def test_a_stale_answer_or_a_rejection_is_not_waited_for() -> None:
    ledger = ClientLedger(wall=Wall())
    ledger.arrived("a", "r1")
    ledger.arrived("a", "r2")  # timed out on r1 and moved on before the engine reaped r1's abort
    ledger.answered("a", "r1")
    assert ledger.awaited() == 0
    ledger.answered("a", "r2")
    assert ledger.awaited() == 1
    ledger.forget("a")  # its next request was turned away (429): not in the engine, nothing to wait for
    assert ledger.awaited() == 0


def test_the_ledger_is_bounded_and_identities_are_cut() -> None:
    ledger = ClientLedger(wall=Wall())
    for n in range(MAX_CLIENTS + 50):
        ledger.arrived(f"c{n}", f"r{n}")
        ledger.answered(f"c{n}", f"r{n}")
    assert ledger.awaited() == MAX_CLIENTS
    assert client_id(None) is None and client_id("  ") is None
    assert client_id("x" * 500) == "x" * 80


def test_hold_freezes_model_time_from_idle_and_from_a_step() -> None:
    wall = Wall()
    clock = SimClock(4.0, wall=wall)
    wall.now += 1.0
    assert clock.hold() == 4.0  # the idle second counted, then frozen
    wall.now += 10.0
    assert clock.now() == 4.0
    clock.begin_step(0.5)
    wall.now += 0.05
    assert clock.hold() == 4.5  # the step in progress ends first
    wall.now += 3.0
    assert clock.now() == 4.5
    clock.begin_idle()
    wall.now += 1.0
    assert clock.now() == 8.5  # idle resumes from where it was held


def _closed_loop(named: bool, answers: int) -> list[SimRequest]:
    """One client, ``answers`` requests in a row, each sent 0.3 s (wall) after the last one's answer."""
    engine = Engine(SimConfig(time_scale=4.0, max_num_seqs=4))
    engine.clients = ClientLedger(forget_after_s=600.0)
    sent: list[SimRequest] = []
    finished = threading.Event()

    def send() -> None:
        sent.append(engine.submit([1] * 64, 4, False, sink, "client-0" if named else None))

    def sink(event: TokenEvent) -> None:
        if not event.finish_reason:
            return
        if len(sent) >= answers:
            finished.set()
            return
        threading.Timer(0.3, send).start()

    engine.start()
    try:
        send()
        assert finished.wait(60), f"only {len(sent)} requests answered"
    finally:
        engine.stop()
    return sent


def test_a_named_client_comes_back_at_the_model_time_it_left() -> None:
    """Without the hold the engine would idle on (model time = wall x scale) through the client's 0.3 s
    absence, or step on without it; with it, each request arrives exactly where the last one finished."""
    sent = _closed_loop(named=True, answers=3)
    gaps: list[Any] = []
    for before, after in zip(sent, sent[1:], strict=False):
        assert before.finished_at is not None
        gaps.append(after.arrival - before.finished_at)
    assert gaps == [0.0, 0.0], gaps  # the engine held its model clock until the client was back
