"""A fake "deploy" for apply mode: replace the running simulator with one started from the given arguments.

Usage: ``python fake_apply.py STATE_FILE ARGS...`` - stops the process group named in
STATE_FILE (one this script started), starts ``python ARGS...`` in a new session, writes
its PID to STATE_FILE and appends the arguments to STATE_FILE.applied. It returns at once,
as ``kubectl patch`` does; the tuner waits for health on its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    state, args = Path(sys.argv[1]), sys.argv[2:]
    if state.exists():
        try:
            pid = int(state.read_text())
            os.killpg(pid, signal.SIGTERM)
            for _ in range(100):  # bounded: 10 s for the old one to let go of the port
                os.killpg(pid, 0)
                time.sleep(0.1)
        except (ProcessLookupError, ValueError):
            pass
    log = open(state.with_suffix(".log"), "ab")
    proc = subprocess.Popen([sys.executable, *args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    state.write_text(str(proc.pid))
    with open(state.with_suffix(".applied"), "a") as fh:
        fh.write(" ".join(args) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
