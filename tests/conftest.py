import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.markers import mark_external  # noqa: E402 - needs ROOT on sys.path


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``external`` for the tests that need a real engine or a Debian tool (tests/support/markers.py says how)."""
    mark_external(items)
