"""The one bounded poll of the tests: ``wait_until(predicate, timeout, what)``.

Why one contract: a wait that returns False leaves the failure message to every
caller (most wrote none); this one raises, names what it waited for and shows
the predicate's last exception or value, so a timeout says why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError, TimeoutError):
    """A ``wait_until`` deadline passed; a test failure (AssertionError) and a TimeoutError."""


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 0.05,
    detail: Callable[[], str] | None = None,
) -> T:
    """Call ``predicate`` every ``interval`` s until it returns something truthy; return that.

    An exception from ``predicate`` counts as "not yet" (a server still starting
    refuses connections). Past ``timeout`` s: ``WaitTimeout`` naming ``what``
    with the last exception or falsy value, and then what ``detail()`` says (the
    state worth seeing only once the wait failed: a log, a query). ``predicate``
    runs at least once, and once more at the deadline, so a short timeout still
    gets a fair last look.
    """
    deadline = time.monotonic() + timeout
    last: str = "never called"
    while True:
        try:
            value = predicate()
            if value:
                return value
            last = f"last value {value!r}"
        except Exception as exc:
            last = f"last error {exc!r}"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            shown = f"timed out after {timeout:g} s waiting for {what} ({last})"
            raise WaitTimeout(shown + (f":\n{detail()}" if detail is not None else ""))
        time.sleep(min(interval, remaining))
