"""Fixtures of the GPU tests: isolation of the DCGM binding imports."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gpu.gpu_helpers import DCGM_MODULES


@pytest.fixture
def no_dcgm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the DCGM bindings unimportable, whatever this machine has installed."""
    for name in DCGM_MODULES:
        monkeypatch.setitem(sys.modules, name, None)


@pytest.fixture
def dcgm_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty binding folder; copy_fake_dcgm() fills it. Imports and sys.path are restored."""
    for name in DCGM_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    # hide real bindings, should this machine have DCGM installed on sys.path
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not (Path(p or ".") / "pydcgm.py").exists()])
    folder = tmp_path / "bindings"
    folder.mkdir()
    yield folder
    for name in DCGM_MODULES:
        sys.modules.pop(name, None)
