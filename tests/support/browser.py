"""Headless Chromium for the page tests: found on PATH or the test is skipped, every run bounded."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

#: no sandbox (containers), no GPU, nothing fetched in the background
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def chromium() -> str:
    """The browser's path; skips the test where none is installed (Debian: apt-get install -y chromium)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    pytest.skip("headless Chromium not installed (Debian: apt-get install -y chromium)")


def run_chromium(args: Sequence[str], profile: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``chromium FLAGS --user-data-dir=PROFILE ARGS``, its output captured (it exits on its own)."""
    return subprocess.run(
        [chromium(), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
