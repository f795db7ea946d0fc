"""``--enable-profile``, ``--profile-dir``, ``--profile-max-trace-bytes``: the on-demand profile's settings.

Why off by default: ``POST /profile`` makes the engine run torch.profiler, which
slows every request it serves while it runs and writes large files; it is an
operator's tool, switched on where wanted. Why the directory is required when
on: the engine writes its traces there and the exporter reads them back, so both
must see it at the same path (a shared volume in a pod, the same host
otherwise); a profile whose traces cannot be found is no profile.

Flags and environment only (``LLM_EXPORTER_ENABLE_PROFILE``,
``LLM_EXPORTER_PROFILE_DIR``, ``LLM_EXPORTER_PROFILE_MAX_TRACE_BYTES``), flags
first, as every other setting (exporter/config.py).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.errors import UsageError
from exporter.profile.trace import DEFAULT_MAX_TRACE_BYTES
from exporter.values import boolean, parsed

#: the smallest and largest read cap (a 1 MiB trace holds a few thousand kernels; 8 GiB is hours of parsing)
MIN_TRACE_BYTES, MAX_TRACE_BYTES = 1024 * 1024, 8 * 1024**3


@dataclass(frozen=True)
class ProfileConfig:
    """Whether ``POST /profile`` is served, where the traces are read, and how much of them."""

    enabled: bool = False
    directory: str | None = None
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES


def add_profile_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("on-demand operator profile (docs/profile.md)")
    group.add_argument(
        "--enable-profile",
        dest="enable_profile",
        action="store_true",
        default=None,
        help="serve POST /profile?engine=NAME&seconds=N: drive the engine's own profiler and publish "
        "llm_operator_time_share (default off; env LLM_EXPORTER_ENABLE_PROFILE)",
    )
    group.add_argument(
        "--profile-dir",
        dest="profile_dir",
        default=None,
        metavar="DIR",
        help="the directory the engine's profiler writes its Chrome traces into, as this process sees it "
        "(vLLM's torch_profiler_dir; sent to SGLang as output_dir); needed by --enable-profile (env LLM_EXPORTER_PROFILE_DIR)",
    )
    group.add_argument(
        "--profile-max-trace-bytes",
        dest="profile_max_trace_bytes",
        default=None,
        metavar="BYTES",
        help=f"most trace bytes (decompressed, all files) one profile reads; a larger trace is refused "
        f"(default {DEFAULT_MAX_TRACE_BYTES}; env LLM_EXPORTER_PROFILE_MAX_TRACE_BYTES)",
    )


def _bytes(value: Any) -> int:
    text = str(value).strip()
    if not text.isdigit() or len(text) > 12:
        raise ValueError(f"expected a whole number of bytes, got {text[:40]!r}")
    n = int(text)
    if not MIN_TRACE_BYTES <= n <= MAX_TRACE_BYTES:
        raise ValueError(f"expected {MIN_TRACE_BYTES}-{MAX_TRACE_BYTES} bytes, got {n}")
    return n


def load_profile(args: argparse.Namespace, env: Mapping[str, str]) -> ProfileConfig:
    """The profile settings from flags > environment; a bad one is a UsageError naming it."""
    enabled = bool(getattr(args, "enable_profile", None))
    if not enabled and env.get("LLM_EXPORTER_ENABLE_PROFILE"):
        enabled = parsed(boolean, env["LLM_EXPORTER_ENABLE_PROFILE"], "LLM_EXPORTER_ENABLE_PROFILE")
    directory = getattr(args, "profile_dir", None)
    where_dir = "--profile-dir"
    if directory is None and env.get("LLM_EXPORTER_PROFILE_DIR"):
        directory, where_dir = env["LLM_EXPORTER_PROFILE_DIR"], "LLM_EXPORTER_PROFILE_DIR"
    cap = getattr(args, "profile_max_trace_bytes", None)
    where_cap = "--profile-max-trace-bytes"
    if cap is None and env.get("LLM_EXPORTER_PROFILE_MAX_TRACE_BYTES"):
        cap, where_cap = env["LLM_EXPORTER_PROFILE_MAX_TRACE_BYTES"], "LLM_EXPORTER_PROFILE_MAX_TRACE_BYTES"
    max_bytes = parsed(_bytes, cap, where_cap) if cap is not None else DEFAULT_MAX_TRACE_BYTES
    if not enabled:
        return ProfileConfig(False, directory, max_bytes)
    if not directory:
        raise UsageError("--enable-profile: needs --profile-dir DIR, the directory the engine's profiler writes its traces into")
    path = Path(directory)
    if not path.is_absolute():
        raise UsageError(f"{where_dir}: expected an absolute path (vLLM requires one too), got {directory[:80]!r}")
    if not path.is_dir() or not os.access(path, os.R_OK | os.X_OK):
        raise UsageError(f"{where_dir}: {directory[:80]!r} is not a readable directory")
    return ProfileConfig(True, str(path), max_bytes)
