"""One profile file, re-read when it changes, the last good reading kept.

Why: an operator re-runs ``tune`` and drops the new tune.json in place; serve
should pick it up without a restart. But a file being rewritten, deleted or
left garbled must never take serve down nor blank the gauges: the last good
profile stays published, the problem is one log line (once per distinct
problem, not once per sample) and a partial error of the source
(``llm_exporter_source_errors_total{reason="file_missing"|"malformed"}``).
"""

from __future__ import annotations

import logging
import os
import time

from exporter.capacity.atslo import SLO
from exporter.capacity.profile import Profile, ProfileError, load_profile
from exporter.samples import SourceError

log = logging.getLogger(__name__)


class ProfileWatcher:
    """``current()``: the last good profile and the problem with the file now (None: none)."""

    def __init__(self, profile: Profile, slo: SLO | None = None) -> None:
        self.path = profile.path
        self.slo = slo
        self.profile = profile
        self._stamp = self._stat()
        #: what is wrong with the file as it is now (a garbled one stays wrong until it changes again)
        self._error: SourceError | None = None

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except (OSError, ValueError):
            return None
        return (st.st_mtime_ns, st.st_size)

    def current(self) -> tuple[Profile, SourceError | None]:
        """Re-read the file if its modification time or size changed; the profile to publish and the problem."""
        stamp = self._stat()
        if stamp is None:
            self._set(SourceError("file_missing", f"capacity profile {self.path}: no such file"))
        elif stamp != self._stamp:
            self._stamp = stamp
            try:
                fresh = load_profile(self.path, self.slo)
            except ProfileError as err:
                self._set(SourceError("malformed", str(err)))
            else:
                self.profile = fresh
                self._error = None
                log.info("capacity profile re-read: %s", fresh.describe())
        elif self._error is not None and self._error.reason == "file_missing":
            self._error = None  # back unchanged (same time and size): the profile held is its content
            log.info("capacity profile %s is back", self.path)
        return self.profile, self._error

    def _set(self, err: SourceError) -> None:
        if self._error is None or self._error.message != err.message:
            log.warning("%s; keeping the last good profile (measured %s)", err.message, _when(self.profile))
        self._error = err


def _when(p: Profile) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(p.measured_at))


__all__ = ["ProfileWatcher"]
