"""The one child-process runner of the tests: output to a log file, bounded start, sure stop.

Why a file and never a pipe: a pipe nobody reads fills (64 KiB) and then blocks
the child's next write, and with it the thread that logs, which a test then
reads as a hang of the exporter. Why a bounded stop: TERM, a bounded wait,
then KILL, so a wedged child never outlives its test. With ``group=True`` the
child leads its own process group and the signals go to the whole group
(engines that fork workers: vLLM, llama.cpp, ``demo``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import httpx

from tests.support.waiting import WaitTimeout, wait_until

if TYPE_CHECKING:  # typing.Self is Python 3.11+; the project supports 3.10
    from typing_extensions import Self

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def exporter_argv(*args: str) -> list[str]:
    """``python -m exporter ARGS`` with this interpreter (the checkout's code, from ``cwd=ROOT``)."""
    return [sys.executable, "-m", "exporter", *args]


def tail(path: Path, lines: int = 60) -> str:
    """The last ``lines`` lines of a log, for a failure message."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Child:
    """``Child(argv, "name").start()``: one child process whose stdout and stderr go to ``self.log``.

    ``env`` adds to this process's environment (``inherit_env=False``: replaces it),
    with ``PYTHONUNBUFFERED=1`` so a Python child's log is current when a test reads it.
    ``log_dir``: where ``<name>.log`` is written and kept (CI collects it); without
    it the log lives in a private temporary folder, removed once this object is
    gone (so ``output()`` still reads it after ``stop()``).
    """

    def __init__(
        self,
        argv: Sequence[str],
        name: str,
        *,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = True,
        cwd: Path | None = ROOT,
        log_dir: Path | None = None,
        group: bool = False,
        grace_s: float = 10.0,
    ) -> None:
        self.argv = list(argv)
        self.name = name
        self.env = {**(os.environ if inherit_env else {}), "PYTHONUNBUFFERED": "1", **(env or {})}
        self.cwd = cwd
        self.group = group
        #: seconds between TERM and KILL in ``stop()``
        self.grace_s = grace_s
        if log_dir is None:
            log_dir = Path(tempfile.mkdtemp(prefix=f"child-{name}-"))
            weakref.finalize(self, shutil.rmtree, log_dir, ignore_errors=True)
        self.log = log_dir / f"{name}.log"
        self.popen: subprocess.Popen[bytes] | None = None
        self._stopped = False

    def start(self) -> Self:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as fh:  # the child keeps its own copy of the descriptor
            self.popen = subprocess.Popen(
                self.argv,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=self.group,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} was never started"
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def output(self, chars: int = 3000) -> str:
        """The last ``chars`` characters the child wrote (stdout and stderr together)."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def describe(self) -> str:
        """``name (exited with N)`` or ``name (running)``, then the log's tail: the body of a failure message."""
        state = "running" if self.alive() else f"exited with {self.returncode}"
        return f"{self.name} ({state}); log {self.log}:\n{tail(self.log)}"

    def wait_ready(self, predicate: Callable[[], T], timeout_s: float, what: str, interval: float = 0.2) -> T:
        """``wait_until(predicate, ...)`` that fails at once when the child exits; either failure shows its log."""

        def ready() -> tuple[T | None] | None:
            if not self.alive():
                return (None,)  # ends the wait at once, to fail below
            value = predicate()
            return (value,) if value else None

        try:
            (value,) = wait_until(ready, timeout_s, what, interval)
        except WaitTimeout as err:
            raise WaitTimeout(f"{err}: {self.describe()}") from None
        if value is None or not self.alive():
            raise AssertionError(f"{self.name} stopped while waiting for {what}: {self.describe()}")
        return value

    def wait_http(
        self, url: str, timeout_s: float, ok: Callable[[httpx.Response], bool] | None = None, interval: float = 0.2
    ) -> float:
        """Poll ``url`` until it answers 200 (and ``ok(response)``); returns the seconds it took."""
        t0 = time.monotonic()

        def answered() -> bool:
            r = httpx.get(url, timeout=5)
            return r.status_code == 200 and (ok is None or ok(r))

        self.wait_ready(answered, timeout_s, f"{url} to answer 200", interval)
        return time.monotonic() - t0

    def start_answering(self, url: str, timeout_s: float) -> float:
        """``start()``, then ``wait_http(url)``; stopped again if it never answers. Returns the seconds it took."""
        self.start()
        try:
            return self.wait_http(url, timeout_s)
        except BaseException:
            self.stop()
            raise

    def _signal(self, sig: int) -> None:
        assert self.popen is not None
        try:
            if self.group:
                os.killpg(self.popen.pid, sig)
            else:
                self.popen.send_signal(sig)
        except ProcessLookupError:
            pass

    def stop(self, grace_s: float | None = None) -> int | None:
        """TERM, wait up to ``grace_s`` (default ``self.grace_s``), then KILL; returns the exit status.

        Idempotent. With ``group``, a last KILL to the group once the leader is
        gone (workers may linger in it), sent once: the group's id is free for reuse after.
        """
        if self.popen is not None and not self._stopped:
            self._stopped = True
            if self.popen.poll() is None:
                self._signal(signal.SIGTERM)
                try:
                    self.popen.wait(self.grace_s if grace_s is None else grace_s)
                except subprocess.TimeoutExpired:
                    self._signal(signal.SIGKILL)
                    self.popen.wait(10)
            if self.group:
                self._signal(signal.SIGKILL)
        return self.returncode

    def __enter__(self) -> Self:
        return self.start() if self.popen is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
