"""A real process for the sampler tests: burns an exact amount of thread CPU on request.

Usage: python proc_worker.py MARKER [--with-child]. Prints "ready"; then reads
commands on stdin: "spin SECONDS" makes one long-lived worker thread burn that
much CPU time (measured with thread_time, so the amount does not depend on how
busy the machine is) and prints "done". With --with-child the spinning happens
in a child process running this same script, so the test proves children count.
EOF is the signal to exit (children follow).
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time


def spinner(jobs: queue.Queue[float], done: queue.Queue[None]) -> None:
    while True:
        seconds = jobs.get()
        start = time.thread_time()
        while time.thread_time() - start < seconds:
            pass
        done.put(None)


def main() -> None:
    marker = sys.argv[1]
    child = None
    if "--with-child" in sys.argv:
        child = subprocess.Popen([sys.executable, __file__, marker], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    jobs: queue.Queue[float] = queue.Queue()
    done: queue.Queue[None] = queue.Queue()
    threading.Thread(target=spinner, args=(jobs, done), daemon=True, name="spinner").start()
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd != "spin":
            continue
        if child is not None:
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write(line)
            child.stdin.flush()
            child.stdout.readline()
        else:
            jobs.put(float(arg))
            done.get(timeout=120)
        print("done", flush=True)
    if child is not None:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)


if __name__ == "__main__":
    main()
