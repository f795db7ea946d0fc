"""Old import paths kept for tests that still use them (tests/monitoring); new code imports tests.support."""

from tests.support.asgi import UvicornThread  # noqa: F401
from tests.support.ports import free_port  # noqa: F401
