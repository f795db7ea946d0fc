"""A larger random llama GGUF (F32) that is slow on one CPU thread, so the engine, not the client, limits.

Why: the integration tests' tiny model (scripts/integration/make_tiny_gguf.py) decodes
~3,000 tokens/s on one thread, so on a 2-core runner the Python load generator's stream
parsing bends the curve before llama.cpp's slots do, and more slots measure as noise.
Two sizes, the same vocabulary and writer as the tiny model (its module, shape patched):

* ``small`` (the default; 16.8 M parameters: n_embd 512, n_ff 2048, 4 layers, ~67 MB of
  weights): the model of the runs in docs/tune.md.
* ``large`` (63 M parameters: n_embd 1024, n_ff 4096, 4 layers, ~252 MB): what
  tests/tune/test_tune_llamacpp.py measures more slots with. A batch of slots shares each
  step's weight reads, so how much four slots gain over one depends on those reads coming
  from DRAM. The small model streamed from DRAM here (32 MB L3: four slots x1.43 in
  tokens/s, 256-token outputs) but gained x1.1 on a CI host with a faster baseline, as when
  the weights stay in a larger last-level cache and a step costs compute per sequence;
  252 MB is beyond what a 2-core VM gets of any server L3: x2.04 here on the same measure.

    GGUF_VENV_PYTHON make_slow_gguf.py OUT.gguf [small|large]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "integration"))

import make_tiny_gguf

SHAPES = {
    "small": {"HIDDEN": 512, "INTERMEDIATE": 2048, "LAYERS": 4, "HEADS": 8, "KV_HEADS": 4, "HEAD_DIM": 64},
    "large": {"HIDDEN": 1024, "INTERMEDIATE": 4096, "LAYERS": 4, "HEADS": 16, "KV_HEADS": 8, "HEAD_DIM": 64},
}

if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] not in SHAPES):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    for name, value in SHAPES[sys.argv[2] if len(sys.argv) == 3 else "small"].items():
        setattr(make_tiny_gguf, name, value)
    sys.exit(make_tiny_gguf.main(sys.argv[:2]))
