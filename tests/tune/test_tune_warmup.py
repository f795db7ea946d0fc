"""The warm-up before a configuration's first repeat: what it records, and when it rejects the configuration."""

from __future__ import annotations

from exporter.ramp.load import LoadSettings
from exporter.tune.warmup import WarmUp, warm_up
from tests.support.ports import free_port


def test_a_warm_up_that_served_requests_is_no_failure_even_with_some_errors() -> None:
    assert WarmUp(concurrency=4, seconds=9.0, requests=30, errors=2).failure() is None
    assert WarmUp(concurrency=4, seconds=0.0, requests=0, errors=0).failure() is None  # nothing sent: nothing proven wrong


def test_a_warm_up_whose_requests_all_failed_names_the_first_errors() -> None:
    why = WarmUp(4, 3.0, 0, 20, ("error: connection refused",)).failure()
    assert why == "all 20 warm-up requests failed: error: connection refused"


def test_warm_up_against_a_closed_port_fails_fast_and_still_waits_its_quiet_gap() -> None:
    slept: list[float] = []
    load = LoadSettings(
        base_url=f"http://127.0.0.1:{free_port()}",  # nothing listens: every request is refused
        model="m",
        step_seconds=30.0,
        prompt_tokens=8,
        output_tokens=8,
        request_timeout_s=5.0,
    )
    done = warm_up(load, concurrency=2, quiet_s=7.5, sleep=slept.append)
    assert slept == [7.5]
    assert done.concurrency == 2 and done.requests == 0 and done.errors >= 20, done
    assert done.seconds < 30.0  # the load generator stopped at the 20th failure in a row, not at the step's end
    failure = done.failure()
    assert failure is not None and failure.startswith(f"all {done.errors} warm-up requests failed: ")
    assert done.as_dict()["error_messages"] == list(done.error_messages) and done.error_messages
