"""One request inside the simulated engine, and the events it sends back to its client.

Why its own module: the scheduler, the engine loop and the HTTP layer all touch
a request; keeping its fields and the token arithmetic in one place keeps
"how many tokens still need KV" defined once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from exporter.simulator import tokenizer
from exporter.simulator.kvcache import block_hashes


@dataclass(frozen=True)
class TokenEvent:
    """What the client of one request learns after a step: new text, maybe the end."""

    text: str
    tokens: int
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(eq=False)
class SimRequest:
    """A request's progress. Times are model seconds (see :mod:`exporter.simulator.clock`)."""

    id: str
    prompt_ids: list[int]
    max_tokens: int
    streaming: bool
    sink: Callable[[TokenEvent], None]
    arrival: float
    seed: int = 0
    output_ids: list[int] = field(default_factory=list)
    #: tokens whose KV is computed and held
    num_computed: int = 0
    blocks: list[int] = field(default_factory=list)
    #: chained hashes of the full blocks of prompt + output seen so far
    hashes: list[bytes] = field(default_factory=list)
    #: how many of ``blocks`` were offered to the prefix cache
    registered: int = 0
    #: blocks parked in host memory by a swap-mode preemption
    swapped_blocks: int = 0
    preemptions: int = 0
    aborted: bool = False
    finish_reason: str | None = None
    #: prompt tokens served by the prefix cache at first admission (local, external)
    cached_tokens: int = 0
    external_tokens: int = 0
    first_scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    finished_at: float | None = None
    #: True while a batching window holds this request back
    deferred: bool = False
    #: True while the request is in the scheduler's running batch
    running: bool = False
    prompt_len: int = 0
    #: the closed-loop client that sent it (exporter/simulator/lockstep.py); None: not a named client
    client: str | None = None
    #: mixed into the hash of its first block (vLLM's cache_salt): a request with a salt of its own
    #: matches no other request's cached blocks, however alike the prompts (SimConfig.cache_salt_per_request)
    cache_salt: bytes = b""

    def __post_init__(self) -> None:
        self.prompt_len = len(self.prompt_ids)

    @property
    def total_len(self) -> int:
        return self.prompt_len + len(self.output_ids)

    @property
    def remaining(self) -> int:
        """Tokens whose KV must still be computed before the next output token can be sampled."""
        return self.prompt_len + len(self.output_ids) - self.num_computed

    @property
    def in_decode(self) -> bool:
        n_out = len(self.output_ids)
        return n_out > 0 and self.prompt_len + n_out - self.num_computed == 1

    def token_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    def ensure_hashes(self, block_size: int) -> list[bytes]:
        """Extend the chained block hashes to every full block of the current tokens."""
        full = self.total_len // block_size
        if len(self.hashes) < full:
            ids = self.token_ids()
            start = len(self.hashes)
            # chain from the last known hash (the salt before the first block): only the new blocks are hashed
            prev = self.hashes[-1] if self.hashes else (self.cache_salt or None)
            self.hashes.extend(block_hashes(ids[start * block_size : full * block_size], block_size, prev))
        return self.hashes

    def next_output_word(self) -> tuple[str, int]:
        pos = len(self.output_ids)
        return tokenizer.output_word(self.seed, pos), tokenizer.output_token_id(self.seed, pos)
