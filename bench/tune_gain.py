"""What ``tune``'s first move gains on a real engine on this CPU: llama.cpp ``-np 1 -> 4`` and the
CPU vLLM ``--max-num-seqs 1 -> 2``, two repeats each, as tests/tune/ sets them up.

    python3 -m bench.tune_gain                 # both engines (about 9 minutes on 2 cores)
    python3 -m bench.tune_gain --only llamacpp

Why a benchmark (issue 31): the gain is a property of the host (the vLLM test's docstring:
``avx512_bf16``, the cache size), so asserting "> 5 %" in the gate failed on hosts where the
move gains less. The gate keeps the decision and the records (tests/tune/test_tune_vllm.py,
tests/tune/test_tune_llamacpp.py); this prints each configuration's requests/s per repeat,
whether the accept rule took the move, and the recommendation's gain. Needs the engine caches
(scripts/integration/setup_vllm.sh, setup_llamacpp.sh).
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tests.integration.integration_helpers import LLAMACPP_SETUP_TIMEOUT_S, run_setup
from tests.support.ports import free_port
from tests.tune import test_tune_llamacpp as llama_test
from tests.tune import test_tune_vllm as vllm_test
from tests.tune.tune_cli import measured, run_tune
from tests.tune.workload import workload

REPEATS = 2


def _summary(name: str, doc: dict[str, Any], rc: int) -> str:
    if rc != 0 or not doc.get("trials"):
        return f"{name}: tune exited {rc} with no trial"
    base, first = doc["baseline"], doc["trials"][0]
    rec = doc.get("recommendation") or {}
    gain = rec.get("gain")
    b, c = base.get("capacity") or {}, first.get("capacity") or {}
    return (
        f"{name}: {first['changes']} accepted={first['accepted']} gain={'-' if gain is None else f'x{gain:.2f}'}; "
        f"at the SLO baseline {b.get('requests_per_second')} req/s at {b.get('concurrency')} clients, "
        f"candidate {c.get('requests_per_second')} req/s at {c.get('concurrency')} clients\n{measured(doc)}"
    )


def llamacpp(out: Path) -> str:
    paths = run_setup("setup_llamacpp.sh", LLAMACPP_SETUP_TIMEOUT_S)
    server = Path(paths["LLAMA_SERVER"])
    build = server.parent.name.rpartition("-b")[2]
    gguf_python = Path(paths["LLAMA_MODEL"]).parent / f"gguf-venv-b{build}" / "bin" / "python"
    model = out / "slow-llama.gguf"
    subprocess.run([str(gguf_python), str(llama_test.HERE / "make_slow_gguf.py"), str(model), "large"], check=True, timeout=120)
    engine = [str(server), "-m", str(model), "--host", "127.0.0.1", "--port", str(free_port()), "--metrics", "--no-webui"]
    engine += llama_test.ONE_SLOT_ARGS
    doc, _, rc = run_tune(out / "tune", [*llama_test.TUNE_OPTIONS, "--repeats", str(REPEATS), *llama_test.RAMP], engine)
    return _summary("llama.cpp -np 1", doc, rc)


def vllm(out: Path) -> str:
    engine = vllm_test._engine(vllm_test._slow_model(out / "model"))
    ramp = workload("1,2,4", 8, vllm_test.OUTPUT_TOKENS, step_seconds=8, start_timeout=vllm_test.START_TIMEOUT_S)
    doc, _, rc = run_tune(out / "tune", [*vllm_test.TUNE_OPTIONS, "--repeats", str(REPEATS), *ramp], engine, timeout=900)
    return _summary("vLLM --max-num-seqs 1", doc, rc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.tune_gain", description=__doc__)
    ap.add_argument("--only", choices=("llamacpp", "vllm"), action="append")
    args = ap.parse_args(argv)
    for name, run in (("llamacpp", llamacpp), ("vllm", vllm)):
        if args.only and name not in args.only:
            continue
        with tempfile.TemporaryDirectory(prefix=f"tune-gain-{name}-") as tmp:
            print(run(Path(tmp)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
