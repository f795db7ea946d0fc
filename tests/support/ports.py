"""Free TCP ports on 127.0.0.1, for servers the tests start.

A port is checked free by binding it, then released for the caller's server to bind: racy by
nature, so the ports come from where nothing else on the machine takes them by chance:

* below the kernel's ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``), where no
  client socket's source port and no server bound to port 0 lands;
* with pytest-xdist, each worker its own residue class (port % workers == worker index), so
  two workers never hand out the same port, and ``closed_port_url`` stays closed;
* never the same port twice in a row from one process (two servers a test starts before
  either binds).

Where the machine leaves no room below the ephemeral range, the kernel picks (port 0), as
before: correct on one worker, racy between workers.
"""

from __future__ import annotations

import functools
import os
import random
import socket
from collections import deque
from pathlib import Path

#: the lowest port handed out: above the registered services most machines run
LOWEST_PORT = 20000
#: ports this process handed out recently: not handed out again while a caller may not have bound them yet
_recent: deque[int] = deque(maxlen=512)
_rng = random.Random()


@functools.cache
def _ephemeral_low(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    """The kernel's lowest ephemeral port (32768 where the file is unreadable: Linux's default); read once."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def worker_slot(environ: dict[str, str] | os._Environ[str] = os.environ) -> tuple[int, int]:
    """(this worker's index, the number of workers): (0, 1) outside pytest-xdist."""
    name = environ.get("PYTEST_XDIST_WORKER", "")
    count = environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if name.startswith("gw") and name[2:].isdigit() and count.isdigit() and int(count) > 0:
        return int(name[2:]) % int(count), int(count)
    return 0, 1


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _kernel_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port() -> int:
    """A port nothing listens on right now, from this worker's share of the ports below the ephemeral range."""
    index, count = worker_slot()
    high = _ephemeral_low()
    slots = (high - LOWEST_PORT) // count
    if slots < 64:
        return _kernel_port()
    for _ in range(4 * slots):
        port = LOWEST_PORT + _rng.randrange(slots) * count + index
        if port not in _recent and _bindable(port):
            _recent.append(port)
            return port
    raise RuntimeError(f"no free port in {LOWEST_PORT}-{high - 1} for worker {index} of {count}")


def closed_port_url(path: str = "/metrics") -> str:
    """A URL on a 127.0.0.1 port nothing listens on: a connection there is refused."""
    return f"http://127.0.0.1:{free_port()}{path}"
