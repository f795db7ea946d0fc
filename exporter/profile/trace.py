"""Bounded, streaming reading of the Chrome trace files an engine's profiler wrote.

Why streaming: a GPU trace of a few seconds under load is tens to hundreds of
megabytes of JSON (torch.profiler writes one event per kernel launch, with its
stack), and ``json.load`` of it would cost several times that in memory inside
the exporter. Here the file is decompressed (gzip or not, told by its magic
bytes) in chunks, the ``traceEvents`` array is found, and each event object is
decoded on its own with ``json.JSONDecoder.raw_decode`` and handed to the
caller, so memory holds one chunk and one event at a time.

Why caps: the directory is written by another process. The bytes read per
profile (decompressed, all files together), the size and nesting depth of one
event (exporter/jsonsafe.py's bound: a deeper one would make the C decoder
recurse past Python's limit) and the number of files are bounded; past a cap the
read stops with ``TraceError`` naming the cap, and nothing of the partial split
is published.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import zlib
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from exporter.jsonsafe import MAX_DEPTH, JSONLimitError, check_depth

#: the decompressed bytes read per profile, all trace files together
DEFAULT_MAX_TRACE_BYTES = 512 * 1024 * 1024
#: the largest single event object (a kernel event with its args is well under 4 KiB)
MAX_EVENT_BYTES = 1024 * 1024
#: the deepest nesting of one event (a kernel event with its args nests 3 levels)
MAX_EVENT_DEPTH = MAX_DEPTH
#: trace files read per profile (one per worker rank, plus the front end's CPU trace)
MAX_FILES = 64
#: file names an engine's torch profiler writes
SUFFIXES = (".json", ".json.gz")
#: directory entries looked at (per folder)
MAX_LISTED = 10_000
_CHUNK = 256 * 1024
_GZIP_MAGIC = b"\x1f\x8b"
_KEY = re.compile(r'"traceEvents"\s*:\s*\[')
_SEPARATORS = re.compile(r"[\s,]+")


class TraceError(Exception):
    """A trace that cannot be read within the caps; the message is one line naming the reason."""


@dataclass
class Budget:
    """Decompressed bytes left for this profile (shared by every file of it)."""

    limit: int
    used: int = 0

    def take(self, n: int, path: Path) -> None:
        self.used += n
        if self.used > self.limit:
            raise TraceError(
                f"{path.name}: the trace files are over the {self.limit} byte read cap "
                f"(--profile-max-trace-bytes); profile for fewer seconds or raise the cap"
            )


def is_trace_name(name: str) -> bool:
    return name.endswith(SUFFIXES)


def list_traces(directory: Path) -> dict[Path, tuple[int, int]]:
    """Trace files in ``directory`` and its subfolders one level down: path -> (mtime in ns, size).

    A profile's traces are the files that are new or changed against the listing
    taken before it started (an mtime alone cannot tell two profiles a second apart).
    """
    found: dict[Path, tuple[int, int]] = {}
    try:
        entries = list(os.scandir(directory))[:MAX_LISTED]
    except OSError as err:
        raise TraceError(f"cannot list the profile directory {directory}: {err.strerror or err}") from None
    for entry in entries:
        try:
            subs = list(os.scandir(entry.path))[:MAX_LISTED] if entry.is_dir(follow_symlinks=False) else [entry]
            for f in subs:
                if f.is_file(follow_symlinks=False) and is_trace_name(f.name):
                    st = f.stat(follow_symlinks=False)
                    found[Path(f.path)] = (st.st_mtime_ns, st.st_size)
        except OSError:
            continue  # removed while listed
    return found


def new_traces(before: dict[Path, tuple[int, int]], now: dict[Path, tuple[int, int]]) -> list[Path]:
    """The files of ``now`` that ``before`` did not have or had with another mtime or size, oldest first."""
    changed = [(stamp, path) for path, stamp in now.items() if before.get(path) != stamp]
    return [path for _, path in sorted(changed)]


def _chunks(fh: BinaryIO, path: Path, budget: Budget) -> Iterator[bytes]:
    """The decompressed bytes of an open file, chunk by chunk, counted against ``budget``."""
    first = fh.read(_CHUNK)
    inflate = zlib.decompressobj(wbits=47) if first.startswith(_GZIP_MAGIC) else None
    data = first
    while data:
        if inflate is not None:
            try:
                out = inflate.decompress(data, _CHUNK * 4)
                while out:
                    budget.take(len(out), path)
                    yield out
                    out = inflate.decompress(inflate.unconsumed_tail, _CHUNK * 4) if inflate.unconsumed_tail else b""
            except zlib.error as err:
                raise TraceError(f"{path.name}: not a valid gzip file ({err})") from None
        else:
            budget.take(len(data), path)
            yield data
        data = fh.read(_CHUNK)
    if inflate is not None and not inflate.eof:
        raise TraceError(f"{path.name}: the gzip stream ends early (still being written?)")


def events(path: Path, budget: Budget) -> Iterator[dict[str, Any]]:
    """Every event object of one Chrome trace (``{"traceEvents": [...]}`` or a bare ``[...]``).

    Each event is decoded by the C decoder (``raw_decode``) where it starts in the
    buffer; an event cut by the chunk's end fails to decode and waits for the next
    chunk, up to ``MAX_EVENT_BYTES``: past that (or at the end of the file) it is malformed.
    """
    decoder = json.JSONDecoder()
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        fh = open(path, "rb")
    except OSError as err:
        raise TraceError(f"cannot open {path.name}: {err.strerror or err}") from None
    try:
        buf = ""
        started = False
        for chunk in _chunks(fh, path, budget):
            buf += utf8.decode(chunk)
            if not started:
                at = _array_start(buf, path)
                if at is None:
                    if len(buf) > MAX_EVENT_BYTES:
                        raise TraceError(f"{path.name}: no traceEvents array in its first {MAX_EVENT_BYTES} bytes")
                    continue
                buf, started = buf[at:], True
            done, buf = yield from _drain(decoder, buf, path, final=False)
            if done:
                return
        if not started:
            raise TraceError(f"{path.name}: not a Chrome trace (no traceEvents array)")
        done, buf = yield from _drain(decoder, buf + utf8.decode(b"", final=True), path, final=True)
        if not done:
            raise TraceError(f"{path.name}: the trace ends inside its traceEvents array (cut short or still being written)")
    finally:
        fh.close()


def _array_start(buf: str, path: Path) -> int | None:
    """Offset just past the ``[`` that opens the events, or None while not yet seen."""
    head = buf.lstrip()
    if head.startswith("["):
        return len(buf) - len(head) + 1
    if head and not head.startswith("{"):
        raise TraceError(f"{path.name}: not JSON (a Chrome trace starts with {{ or [)")
    found = _KEY.search(buf)
    if found is None:
        return None
    return found.end()


def _drain(decoder: json.JSONDecoder, buf: str, path: Path, final: bool) -> Generator[dict[str, Any], None, tuple[bool, str]]:
    """Yield the whole events at the head of ``buf``; returns (array closed, the unread rest)."""
    pos = 0
    n = len(buf)
    count = buf.count
    while True:
        skip = _SEPARATORS.match(buf, pos)
        pos = skip.end() if skip else pos
        if pos >= n:
            return False, ""
        if buf[pos] == "]":
            return True, ""
        try:
            value, end = decoder.raw_decode(buf, pos)
        except RecursionError:  # the C decoder recursed past Python's limit: far past MAX_EVENT_DEPTH
            raise _too_deep(path) from None
        except json.JSONDecodeError as err:
            if n - pos > MAX_EVENT_BYTES:
                raise TraceError(
                    f"{path.name}: an event over the size cap of {MAX_EVENT_BYTES} bytes, or not JSON ({err.msg})"
                ) from None
            if not final:
                return False, buf[pos:]  # cut by the chunk's end: wait for the rest
            if err.pos >= len(buf.rstrip()) or err.msg.startswith("Unterminated"):
                raise TraceError(f"{path.name}: the trace ends inside an event (cut short or still being written)") from None
            raise TraceError(f"{path.name}: malformed trace event near character {err.pos}: {err.msg}") from None
        except ValueError as err:  # not JSON's own: an integer of more digits than int() converts
            raise TraceError(f"{path.name}: malformed trace event ({str(err)[:80]})") from None
        if end - pos > MAX_EVENT_BYTES:
            raise TraceError(f"{path.name}: an event over the size cap of {MAX_EVENT_BYTES} bytes (not a profiler trace?)")
        # an event needs MAX_EVENT_DEPTH brackets to nest that deep: only then is it scanned
        if count("{", pos, end) + count("[", pos, end) > MAX_EVENT_DEPTH:
            try:
                check_depth(buf[pos:end], MAX_EVENT_DEPTH)
            except JSONLimitError:
                raise _too_deep(path) from None
        if end >= n and not final:
            return False, buf[pos:]  # a number cut at the chunk's end decodes short: wait for the rest
        if isinstance(value, dict):
            yield value
        pos = end


def _too_deep(path: Path) -> TraceError:
    return TraceError(f"{path.name}: an event nested deeper than {MAX_EVENT_DEPTH} levels (not a profiler trace?)")


def read_split(paths: list[Path], add: Callable[[dict[str, Any]], None], max_bytes: int) -> int:
    """Feed every event of ``paths`` to ``add``; returns the decompressed bytes read."""
    if len(paths) > MAX_FILES:
        raise TraceError(f"{len(paths)} trace files were written, over the {MAX_FILES} read per profile")
    budget = Budget(max_bytes)
    for path in paths:
        for event in events(path, budget):
            add(event)
    return budget.used
