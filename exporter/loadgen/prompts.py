"""Synthetic prompts: a length mix, and shared prefixes that a prefix cache can reuse.

Why words: one whitespace-separated word is one token to the simulator and
roughly one to a real tokenizer, so "a 512-token prompt" means the same thing
to both. Shared prefixes are deterministic per group and seed; the unique
remainder carries the request index so that two requests of a run never share
more than their intended prefix, and its first word carries the run's salt
(``LoadSpec.prompt_salt``, random per run by default) so that two runs do not
share it either. Salting that one word is enough: a prefix cache keys each
block on everything before it, and it keeps the word count (the token count)
of a prompt unchanged.
"""

from __future__ import annotations

import random
import secrets

from exporter.loadgen.spec import LoadSpec

_PREFIX_WORDS = (
    "system",
    "policy",
    "context",
    "document",
    "section",
    "clause",
    "table",
    "figure",
    "note",
    "entry",
    "record",
    "field",
    "value",
    "header",
    "summary",
    "detail",
)


def pick(rng: random.Random, mix: tuple[tuple[int, float], ...]) -> int:
    """A value from a ``(value, weight)`` mix."""
    values = [int(v) for v, _ in mix]
    weights = [float(w) for _, w in mix]
    return rng.choices(values, weights)[0]


class PromptFactory:
    """Builds the prompt and output length of request number ``index``."""

    def __init__(self, spec: LoadSpec, rng: random.Random) -> None:
        self.spec = spec
        self.rng = rng
        #: never drawn from ``rng``: the salt must not shift the seeded lengths and prefix choices
        self.salt = secrets.token_hex(4) if spec.prompt_salt is None else spec.prompt_salt
        self._prefixes: dict[int, list[str]] = {}

    def prefix(self, group: int) -> list[str]:
        words = self._prefixes.get(group)
        if words is None:
            g = random.Random(f"{self.spec.seed}/prefix/{group}")
            words = [f"{g.choice(_PREFIX_WORDS)}{g.randrange(10_000)}" for _ in range(self.spec.shared_prefix_tokens)]
            self._prefixes[group] = words
        return words

    def make(self, index: int) -> tuple[str, int, int]:
        """(prompt text, prompt tokens, max_tokens) for request ``index``."""
        length = pick(self.rng, self.spec.prompt_tokens)
        max_tokens = pick(self.rng, self.spec.max_tokens)
        words: list[str] = []
        if self.spec.shared_prefix_tokens and self.rng.random() < self.spec.shared_prefix_ratio:
            group = self.rng.randrange(self.spec.prefix_groups)
            words = self.prefix(group)[: max(0, length - 1)]
        unique = [f"r{index}w{j}" for j in range(length - len(words))]  # the prefix leaves at least one
        if self.salt:
            unique[0] = f"{self.salt}.{unique[0]}"
        words = words + unique
        return " ".join(words), length, max_tokens
