"""The simulator's model-time clock.

Why a separate clock: every latency, rate and GPU ratio the simulator reports
is computed in *model* seconds (what a real engine would take), so they do not
depend on ``--time-scale`` or on how busy the test machine is. Model time
advances by each step's modelled duration while the engine steps, by wall time
times the scale while it truly idles (nothing to run, or a batching window),
and not at all during the simulator's own Python bookkeeping between two
back-to-back steps, nor while it waits for a closed-loop client to come back
(``hold``, exporter/simulator/lockstep.py). If the host machine cannot keep up, the engine falls
behind the wall clock; the model stays self-consistent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

_IDLE, _STEP, _GAP = "idle", "step", "gap"


class SimClock:
    """Model time, safe to read from any thread."""

    def __init__(self, scale: float, wall: Callable[[], float] = time.monotonic) -> None:
        self.scale = scale
        self._wall = wall
        self._lock = threading.Lock()
        self._model = 0.0
        self._mark = wall()
        self._state = _IDLE
        self._step = 0.0

    def now(self) -> float:
        with self._lock:
            if self._state == _GAP:
                return self._model
            elapsed = (self._wall() - self._mark) * self.scale
            if self._state == _STEP:
                elapsed = min(elapsed, self._step)
            return self._model + elapsed

    def begin_idle(self) -> None:
        """From now on model time follows the wall clock (the engine waits for work)."""
        with self._lock:
            if self._state == _STEP:
                self._model += self._step
            if self._state != _IDLE:
                self._mark = self._wall()
            self._state = _IDLE

    def begin_step(self, duration: float) -> float:
        """Start a step of ``duration`` model seconds; returns its model start time."""
        with self._lock:
            wall = self._wall()
            if self._state == _IDLE:
                self._model += (wall - self._mark) * self.scale
            elif self._state == _STEP:
                self._model += self._step
            self._mark = wall
            self._state = _STEP
            self._step = duration
            return self._model

    def end_step(self) -> float:
        """Finish the step in progress: model time jumps to its end and holds there."""
        with self._lock:
            if self._state == _STEP:
                self._model += self._step
            self._state = _GAP
            return self._model

    def cut_step(self) -> float:
        """End the step in progress where the wall clock has got to, short of its full length (a
        data-parallel engine: an idle replica takes a new request at once); model time holds there."""
        with self._lock:
            if self._state == _STEP:
                self._model += min((self._wall() - self._mark) * self.scale, self._step)
            self._state = _GAP
            return self._model

    def hold(self) -> float:
        """Stop model time where it is (a closed-loop client is due back, exporter/simulator/lockstep.py):
        a step in progress ends first; the next ``begin_step`` or ``begin_idle`` resumes it."""
        with self._lock:
            if self._state == _IDLE:
                self._model += (self._wall() - self._mark) * self.scale
            elif self._state == _STEP:
                self._model += self._step
            self._state = _GAP
            return self._model

    def step_wall_deadline(self) -> float:
        """Wall time (time.monotonic) at which the step in progress should end."""
        with self._lock:
            return self._mark + (self._step if self._state == _STEP else 0.0) / self.scale

    def set_scale(self, scale: float) -> None:
        with self._lock:
            if self._state == _IDLE:
                wall = self._wall()
                self._model += (wall - self._mark) * self.scale
                self._mark = wall
            self.scale = scale
