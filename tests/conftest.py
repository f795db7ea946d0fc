"""The suite's one place for tiers (tests/support/tiers.py) and the duration budget (tests/support/durations.py)."""

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support import tiers  # noqa: E402 - needs ROOT on sys.path
from tests.support.durations import DurationRecorder  # noqa: E402

if TYPE_CHECKING:
    from tests.integration.integration_helpers import CpuVllm

# The gate runs every property test on the same examples each time (derandomized, no example
# database): a failure is reproducible and a pass today is a pass tomorrow, as issue 31 asks of
# every test. `HYPOTHESIS_PROFILE=explore` draws fresh random examples, for a fuzzing session.
settings.register_profile("gate", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "gate"))


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("llm-layer-exporter")
    group.addoption("--durations-file", type=Path, default=None, help="write each test's tier and seconds as JSON here")
    group.addoption(
        "--duration-budget",
        action="store_true",
        help="fail the run when a unit test takes over 2 s or a stack test over 90 s (scripts/test.sh passes it)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "stack: starts the simulator, serve, a tool or a static checker as a child process")
    config.addinivalue_line(
        "markers", "real: starts a real engine, Prometheus, Alertmanager or Chromium, or installs from the index"
    )
    recorder = DurationRecorder(config.getoption("--durations-file"), config.getoption("--duration-budget"))
    config.pluginmanager.register(recorder, "llm-duration-recorder")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test gets its tier here (unit: no marker); see tests/support/tiers.py."""
    tiers.assign(items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A unit test that starts a child process fails, naming the table that would move it.

    Around setup, call and teardown alike: a module fixture that forks is caught too.
    """
    if tiers.tiers_of(item) != ["unit"]:
        yield
        return
    with tiers.process_guard(item.nodeid):
        yield


@pytest.fixture(scope="session")
def cpu_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator["CpuVllm"]:
    """The real tier's one CPU vLLM, started on first use and stopped when the session ends.

    Why one: a cold start of the CPU vLLM costs 30-90 s, and the real tier's vLLM tests differ in
    what they read, not in what the engine must be (issue 31: one engine per configuration per
    session). Its configuration is ``SHARED_VLLM_ARGS`` (tests/integration/integration_helpers.py);
    a test that needs the engine below the exporter asks ``engine_priority`` for it, for its own
    duration. A start that fails is reported once and fails every test that uses it (pytest keeps
    a session fixture's error). ``tune`` starts its own engines: they are what it measures.
    """
    from tests.integration.integration_helpers import (
        ENGINE_READY_S,
        TRACING_ENV,
        CpuVllm,
        shared_vllm_args,
        skip_if_off,
        vllm_proc,
    )
    from tests.support.ports import free_port

    skip_if_off("vllm")
    profiles = tmp_path_factory.mktemp("vllm-profiles")
    otlp_port = free_port()  # its request spans: a test's serve listens there (docs/tracing.md)
    proc, base = vllm_proc(shared_vllm_args(profiles, otlp_port), "vllm-shared", env=TRACING_ENV)
    startup = proc.start_answering(base + "/health", ENGINE_READY_S)
    try:
        yield CpuVllm(base, proc, startup, profile_dir=profiles, otlp_port=otlp_port)
    finally:
        proc.stop()
