"""The tiny model both real engines serve in the integration tests: one shape, one word list.

make_tiny_model.py (vLLM: a Hugging Face Llama) and make_tiny_gguf.py (llama.cpp: a GGUF)
import it as a sibling: each runs as ``python scripts/integration/make_tiny_*.py``, so Python
puts this folder first on ``sys.path``. Standard library only, because the two run under
different interpreters (setup_vllm.sh: the vLLM venv's; setup_llamacpp.sh: the gguf venv's).
A change here changes both models: the setup scripts hash this file into their model stamps.
"""

from __future__ import annotations

HIDDEN = 128
INTERMEDIATE = 256
LAYERS = 2
HEADS = 4
KV_HEADS = 2
#: 32: the smallest head size the vLLM CPU attention backend accepts
HEAD_DIM = HIDDEN // HEADS
#: the words of the GGUF's word pieces; the vLLM tokenizer's training corpus uses the first 25
WORDS = (
    "the",
    "cache",
    "block",
    "token",
    "prefix",
    "model",
    "server",
    "request",
    "queue",
    "layer",
    "kernel",
    "memory",
    "decode",
    "prefill",
    "batch",
    "metric",
    "alpha",
    "beta",
    "gamma",
    "delta",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
)
#: the corpus' words: a shorter list than WORDS, as the tokenizer was first trained (another
#: list trains another tokenizer, and the served model's files change)
CORPUS_WORDS = WORDS[:25]
