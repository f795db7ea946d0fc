"""A larger random llama GGUF (16.8 M parameters, F32): slow enough on one CPU thread that the engine, not the client, limits.

Why: the integration tests' tiny model (scripts/integration/make_tiny_gguf.py) decodes
~3,000 tokens/s on one thread, so on a 2-core runner the Python load generator's stream
parsing bends the curve before llama.cpp's slots do, and more slots measure as noise. At
n_embd 512, n_ff 2048 and 4 layers every decode step reads ~67 MB of weights, which a
batch of slots shares: the slot count then decides the capacity, as on a real server.
Same vocabulary and writer as the tiny model (its module, shape patched):

    GGUF_VENV_PYTHON make_slow_gguf.py OUT.gguf
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "integration"))

import make_tiny_gguf

SHAPE = {"HIDDEN": 512, "INTERMEDIATE": 2048, "LAYERS": 4, "HEADS": 8, "KV_HEADS": 4, "HEAD_DIM": 64}

if __name__ == "__main__":
    for name, value in SHAPE.items():
        setattr(make_tiny_gguf, name, value)
    sys.exit(make_tiny_gguf.main(sys.argv))
