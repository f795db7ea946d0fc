#!/usr/bin/env python3
"""Steady load for the docker-compose stack: N workers posting OpenAI completions.

Stdlib only, so it runs in any Python image. Used by the `load` service against the
simulator and by `load-gpu` against vLLM (gpu profile):

    python3 load.py --target http://simulator:8000 --concurrency 8

Waits for the server's /v1/models, then keeps `--concurrency` requests in flight with a
mix of prompt lengths and a shared prefix (so prefix caching has something to hit),
printing one status line per `--report-seconds`. Errors are counted and retried after
a pause; it never exits on its own unless `--duration` is given.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import threading
import time
import urllib.error
import urllib.request

PREFIX = "You are a helpful assistant. Answer briefly and precisely. " * 4
WORDS = "the quick brown fox jumps over a lazy dog while seven layers of an inference stack hum".split()


def fetch_model(target: str, stop: threading.Event, timeout: float) -> str | None:
    """The first model id of /v1/models, retrying until the server answers or stop is set."""
    while not stop.is_set():
        try:
            with urllib.request.urlopen(f"{target}/v1/models", timeout=timeout) as resp:
                return str(json.load(resp)["data"][0]["id"])
        except (OSError, ValueError, KeyError, IndexError) as err:
            print(f"load: waiting for {target}/v1/models: {err}", file=sys.stderr, flush=True)
            stop.wait(2.0)
    return None


def prompt(rng: random.Random, max_words: int) -> str:
    return PREFIX + " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, max_words)))


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ok = 0
        self.errors = 0

    def add(self, ok: bool) -> None:
        with self.lock:
            if ok:
                self.ok += 1
            else:
                self.errors += 1


def worker(args: argparse.Namespace, model: str, stats: Stats, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    url = f"{args.target}/v1/completions"
    while not stop.is_set():
        body = {
            "model": model,
            "prompt": prompt(rng, args.max_prompt_words),
            "max_tokens": rng.randint(max(1, args.max_tokens // 4), args.max_tokens),
            "temperature": 0.0,
        }
        req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=args.timeout) as resp:
                resp.read()
            stats.add(True)
        except (OSError, ValueError):  # URLError/HTTPError/timeouts are OSErrors
            stats.add(False)
            stop.wait(1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="base URL of an OpenAI-compatible server, e.g. http://simulator:8000")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--max-prompt-words", type=int, default=400)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    parser.add_argument("--report-seconds", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0: run until stopped)")
    args = parser.parse_args(argv)
    args.target = args.target.rstrip("/")
    if args.concurrency < 1 or args.max_tokens < 1:
        parser.error("--concurrency and --max-tokens must be at least 1")

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    deadline = time.monotonic() + args.duration if args.duration > 0 else None

    model = fetch_model(args.target, stop, args.timeout)
    if model is None:
        return 0
    print(f"load: {args.concurrency} workers -> {args.target} model {model}", flush=True)
    stats = Stats()
    threads = [threading.Thread(target=worker, args=(args, model, stats, stop, i), daemon=True) for i in range(args.concurrency)]
    for t in threads:
        t.start()
    last = time.monotonic()
    while not stop.wait(min(args.report_seconds, 0.5)):
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            stop.set()
        elif now - last >= args.report_seconds:
            report(stats)
            last = now
    for t in threads:
        t.join(timeout=args.timeout)
    report(stats)
    return 0


def report(stats: Stats) -> None:
    with stats.lock:
        print(f"load: {stats.ok} completed, {stats.errors} errors", flush=True)


if __name__ == "__main__":
    sys.exit(main())
