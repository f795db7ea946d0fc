"""A whitespace "tokenizer" and a deterministic output vocabulary.

Why this simple: the simulator needs token *counts* and token *identity* (so
identical prompt prefixes hash to identical KV blocks), not language. One
whitespace-separated word is one token; its id is a CRC32 of the word. The load
generator builds prompts of N words to ask for N tokens.
"""

from __future__ import annotations

import zlib
from typing import Any

#: Words the simulated model "generates" (cycled deterministically per request).
VOCAB: tuple[str, ...] = (
    "the",
    "layer",
    "cache",
    "token",
    "batch",
    "kernel",
    "memory",
    "queue",
    "prefill",
    "decode",
    "block",
    "tensor",
    "stream",
    "clock",
    "power",
    "thread",
    "model",
    "scheduler",
    "latency",
    "window",
)
#: Words a chat template adds around each message.
ROLE_TAG = "<|{role}|>"
ASSISTANT_TAG = "<|assistant|>"


def encode(text: str) -> list[int]:
    return [zlib.crc32(w.encode()) for w in text.split()]


def chat_prompt(messages: list[dict[str, Any]]) -> str:
    """Flatten chat messages the way a chat template would (role tag, content) plus the reply tag."""
    parts = []
    for m in messages:
        parts.append(ROLE_TAG.format(role=m["role"]))
        parts.append(m["content"])
    parts.append(ASSISTANT_TAG)
    return " ".join(parts)


def output_word(seed: int, position: int) -> str:
    return VOCAB[(seed * 7 + position * 13) % len(VOCAB)]


_VOCAB_IDS: tuple[int, ...] = tuple(zlib.crc32(w.encode()) for w in VOCAB)


def output_token_id(seed: int, position: int) -> int:
    return _VOCAB_IDS[(seed * 7 + position * 13) % len(VOCAB)] ^ (position & 0xFF)
