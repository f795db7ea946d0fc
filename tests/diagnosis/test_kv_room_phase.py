"""The room a slot engine's cache has does not depend on how far its running requests have got.

llama.cpp publishes no finished-request count, so a request's size is read from what its
slot holds. Read from the slots' context in use *now*, a one-slot server with five waiting
looked nearly empty early in each request and half full late in it: the severity, and the
confidence on it, jumped between readings of one steady state (a real llama.cpp -np 1 read
0.49 and 0.61 in turn). Read as the most a busy slot held over the window, it is steady.
"""

from __future__ import annotations

from exporter.diagnosis import signals as s
from exporter.diagnosis.rules import RULES, kv_room
from exporter.diagnosis.thresholds import Thresholds

T = Thresholds()
RULE = next(r for r in RULES if r.cause == "kv_fragmentation_or_capacity_misjudged")


def one_slot(in_use_now: float, held_max: float = 320.0, context: float = 2048.0) -> dict[str, float]:
    """One slot of ``context`` tokens, busy, five requests waiting for it; the request in it holds
    ``in_use_now`` tokens at this sample and requests reach ``held_max`` tokens."""
    return {
        s.SLOTS: 1.0,
        s.SLOTS_BUSY: 1.0,
        s.SLOTS_BUSY_MAX: 1.0,
        s.SLOT_CONTEXT: context,
        s.SLOT_CONTEXT_USAGE: in_use_now / context,
        s.SLOT_HELD_MAX: held_max,
        s.RUNNING: 1.0,
        s.RUNNING_MAX: 1.0,
        s.RUNNING_MAX_RECENT: 1.0,
        s.WAITING: 5.0,
        s.WAITING_MAX: 5.0,
        s.WAITING_MIN: 5.0,
    }


def test_the_room_and_severity_are_the_same_early_and_late_in_a_request() -> None:
    early, late = one_slot(40.0), one_slot(310.0)
    assert RULE.condition(early, T) and RULE.condition(late, T)
    assert kv_room(early, T) == kv_room(late, T)
    assert RULE.severity(early, T) == RULE.severity(late, T)


def test_requests_that_grow_to_fill_the_context_leave_no_room() -> None:
    roomy, tight = kv_room(one_slot(40.0, held_max=320.0), T), kv_room(one_slot(40.0, held_max=1900.0), T)
    assert roomy is not None and tight is not None
    free, need, per_request, head = roomy
    assert (per_request, head) == (320.0, 1.0) and free == 2048.0 - 320.0 and need == 320.0
    assert tight[0] < tight[1]  # 148 free tokens cannot hold the next 1,900-token request
    assert not RULE.condition(one_slot(40.0, held_max=1900.0), T)
