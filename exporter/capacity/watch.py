"""One profile file, re-read when it changes, the last good reading kept.

Why: an operator re-runs ``tune`` and drops the new tune.json in place; serve
should pick it up without a restart. But a file being rewritten, deleted or
left garbled must never take serve down nor blank the gauges: the last good
profile stays published, the problem is one log line (once per distinct
problem, not once per sample) and a partial error of the source
(``llm_exporter_source_errors_total{reason="file_missing"|"too_large"|"malformed"}``).

Why it cannot stall serve: the file is read on the derive stage's thread, never
on the event loop, and only when its modification time or size changed (a stat
per pass otherwise); what profile.py reads is a regular file of at most
``MAX_BYTES``, and a FIFO or device put in its place is refused from its
``stat`` without being opened for reading. The bytes are decoded at most once
per change of content: a file touched again and again with the same bytes costs
a read and a hash, not a decode (decoding is what holds the interpreter's lock).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time

from exporter.capacity.atslo import SLO
from exporter.capacity.profile import Profile, ProfileError, parse_profile, read_file, shown
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
        #: the digest of the bytes decoded last, and what was wrong with them (None: they were the profile held)
        self._decoded: tuple[bytes, SourceError | None] | None = None

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
            self._set(SourceError("file_missing", f"capacity profile {shown(self.path)}: no such file"))
        elif stamp != self._stamp:
            self._stamp = stamp
            self._reread()
        elif self._error is not None and self._error.reason == "file_missing":
            self._back()  # back unchanged (same time and size): the profile held is its content
        return self.profile, self._error

    def _reread(self) -> None:
        try:
            file = read_file(self.path)
        except ProfileError as err:
            self._set(SourceError(err.reason, str(err)))
            return
        digest = hashlib.blake2b(file.data, digest_size=16).digest()
        if self._decoded is not None and self._decoded[0] == digest:  # touched, or put back: decoded already
            problem = self._decoded[1]
            if problem is None:
                self._back()
            else:
                self._set(problem)
            return
        try:
            fresh = parse_profile(self.path, file, self.slo)
        except ProfileError as err:
            problem = SourceError(err.reason, str(err))
            self._decoded = (digest, problem)
            self._set(problem)
        else:
            self._decoded = (digest, None)
            self.profile = fresh
            self._error = None
            log.info("capacity profile re-read: %s", fresh.describe())

    def _back(self) -> None:
        if self._error is not None:
            self._error = None
            log.info("capacity profile %s is back", shown(self.path))

    def _set(self, err: SourceError) -> None:
        if self._error is None or self._error.message != err.message:
            log.warning("%s; keeping the last good profile (measured %s)", err.message, _when(self.profile))
        self._error = err


def _when(p: Profile) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(p.measured_at))


__all__ = ["ProfileWatcher"]
