"""Continuous batching over a paged KV cache: what runs in each engine step.

Why separate from the engine loop: scheduling is pure bookkeeping (no threads,
no clocks of its own), so tests drive it step by step and check preemption,
prefix hits and admission rules exactly.

The policy follows vLLM's V1 scheduler: running requests first (decode, or the
next chunk of a chunked prefill) within a per-step token budget; when a
running request needs a KV block and none is free, the most recently admitted
request is preempted (recompute: its blocks are dropped and it re-queues at the
front; swap: its blocks are copied to host memory over PCIe). Waiting requests
are admitted only in steps without preemption, while the batch has room, the
budget lasts and the admission rule holds (free blocks above a watermark, or,
with ``kv_reserve_full``, enough blocks for prompt + max_tokens up front).

KV below the GPU: with ``kv_offload`` the prefix cache lives in host memory (finished
requests' blocks are stored there); with ``kv_offload_blocks`` the GPU keeps its own prefix
cache and a host tier of that many blocks catches what it evicts, so a later prompt whose
prefix the GPU lost is loaded back from host memory (a host-tier hit: ``prompt_tokens_external``,
``offload_loaded_blocks``) instead of recomputed.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

from exporter.simulator.kvcache import BlockPool, HostTier
from exporter.simulator.requests import SimRequest, TokenEvent
from exporter.simulator.roofline import StepWork
from exporter.simulator.settings import SimConfig
from exporter.simulator.stats import EngineStats, streaming_key


class QueueFull(Exception):
    """The waiting queue is at ``max_queue_len``: the HTTP layer answers 429."""


@dataclass
class Scheduled:
    request: SimRequest
    tokens: int
    draft_tokens: int
    prefill: bool


@dataclass
class Plan:
    """One step: who computes how many tokens, and the copies the step needs."""

    items: list[Scheduled] = field(default_factory=list)
    h2d_bytes: float = 0.0
    d2h_bytes: float = 0.0
    preempted: int = 0

    @property
    def empty(self) -> bool:
        return not self.items and not self.h2d_bytes and not self.d2h_bytes

    def work(self, spec_tokens: int) -> StepWork:
        w = StepWork(h2d_bytes=self.h2d_bytes, d2h_bytes=self.d2h_bytes)
        for s in self.items:
            ctx = s.request.num_computed
            w.attention_pairs += s.tokens * ctx + s.tokens * s.tokens / 2.0
            w.kv_read_tokens += ctx
            if s.prefill:
                w.prefill_tokens += s.tokens
            else:
                w.decode_tokens += s.tokens
                w.decode_seqs += 1
        if spec_tokens and any(s.draft_tokens for s in self.items):
            w.draft_passes = spec_tokens
        w.seqs = len(self.items)
        return w


class Scheduler:
    """Waiting queue, running batch, KV pools and the statistics they produce."""

    def __init__(self, config: SimConfig, stats: EngineStats) -> None:
        self.config = config
        self.stats = stats
        self.pool = BlockPool(config.num_gpu_blocks, config.enable_prefix_caching and not config.kv_offload)
        self.host = HostTier(config.num_cpu_blocks)
        #: the host KV tier of ``kv_offload_blocks``: the GPU prefix cache's evictions, kept
        self.offload = HostTier(config.kv_offload_blocks)
        self.pool.on_evict = self._offload_evicted
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.rng = random.Random(config.seed)
        self._pending_d2h = 0.0
        self.max_seq_len = 0

    # ------------------------------------------------------------------ helpers
    @property
    def block_bytes(self) -> int:
        return self.config.block_size * self.config.geometry.kv_bytes_per_token

    def _blocks_for(self, tokens: int) -> int:
        return math.ceil(tokens / self.config.block_size)

    def waiting_deferred(self) -> int:
        return sum(1 for r in self.waiting if r.deferred)

    def reconfigure(self, config: SimConfig, now: float) -> None:
        """Apply new knobs; a smaller KV pool preempts running requests until it fits."""
        self.config = config
        self.pool.enable_prefix_caching = config.enable_prefix_caching and not config.kv_offload
        self.host.total = config.num_cpu_blocks
        self.offload.total = config.kv_offload_blocks
        self.offload.store(())  # a smaller tier drops its least recently used blocks now
        if self.pool.total != config.num_gpu_blocks:
            self.pool.resize(config.num_gpu_blocks)
            plan = Plan()
            while self.pool.pending_retire > 0 and self.running:
                self._preempt(self.running[-1], plan, force_recompute=True)
            self._pending_d2h += plan.d2h_bytes

    # ------------------------------------------------------------------ admission
    def submit(self, req: SimRequest) -> None:
        """Admit ``req`` unless the waiting queue is at its bound (QueueFull, counted as rejected)."""
        if len(self.waiting) >= self.config.max_queue_len:
            self.stats.inc("rejected", labels={"reason": "queue_full"})
            raise QueueFull(f"{len(self.waiting)} requests waiting (max_queue_len {self.config.max_queue_len})")
        self.admit(req)

    def admit(self, req: SimRequest) -> None:
        """Queue ``req`` whose bound the front end already checked (Engine.submit, without the lock)."""
        self.stats.inc("requests_received")
        self.stats.observe("max_tokens", req.max_tokens)
        self.waiting.append(req)

    def abort(self, req: SimRequest) -> None:
        req.aborted = True

    def reap_aborted(self, now: float) -> list[SimRequest]:
        """Finish aborted requests (client gone): free their blocks, count finished_reason abort."""
        gone = [r for r in self.waiting if r.aborted] + [r for r in self.running if r.aborted]
        if not gone:
            return gone
        for r in gone:
            if r.running:
                self.running.remove(r)
                r.running = False
                self.pool.release(r.blocks)
                r.blocks = []
            else:
                self.waiting.remove(r)
                if r.swapped_blocks:
                    self.host.swap_in(r.swapped_blocks)
                    r.swapped_blocks = 0
            self._finish(r, "abort", now)
        return gone

    # ------------------------------------------------------------------ one step
    def schedule(self, now: float) -> Plan:
        cfg = self.config
        plan = Plan(d2h_bytes=self._pending_d2h)
        self._pending_d2h = 0.0
        budget = cfg.max_num_batched_tokens
        k = cfg.spec_tokens
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            if req.in_decode:
                drafts = k if k and budget >= 1 + k else 0
                n = 1 + drafts
            else:
                drafts = 0
                n = min(req.remaining, budget)
            need = self._blocks_for(req.num_computed + n) - len(req.blocks)
            while need > self.pool.free and req.running:
                self._preempt(self.running[-1], plan)
            if not req.running:
                break  # the request itself was the last one and got preempted
            if need > 0:
                req.blocks.extend(self.pool.allocate(need))
            plan.items.append(Scheduled(req, n, drafts, prefill=not req.in_decode))
            budget -= n
            i += 1
        if plan.preempted == 0:
            self._admit(plan, budget, now)
        return plan

    def _hold_for_window(self, now: float) -> bool:
        cfg = self.config
        if cfg.batch_wait_s <= 0 or not self.waiting:
            for r in self.waiting:
                r.deferred = False
            return False
        head = self.waiting[0]
        if head.first_scheduled is not None:
            return False
        need = cfg.batch_min_requests or cfg.max_num_seqs
        new = [r for r in self.waiting if r.first_scheduled is None]
        hold = now - head.arrival < cfg.batch_wait_s and len(new) < need
        for r in new:
            r.deferred = hold
        return hold

    def hold_remaining(self, now: float) -> float | None:
        """Model seconds until a batching window releases the queue head, or None."""
        if self.config.batch_wait_s <= 0 or not self.waiting or self.running:
            return None
        head = self.waiting[0]
        return max(0.0, head.arrival + self.config.batch_wait_s - now)

    def _admit(self, plan: Plan, budget: int, now: float) -> None:
        cfg = self.config
        if self._hold_for_window(now):
            return
        watermark = int(cfg.kv_watermark * self.pool.total)
        while self.waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
            req = self.waiting[0]
            if req.aborted:
                break
            if req.swapped_blocks:
                n = 1
                need = req.swapped_blocks + max(0, self._blocks_for(req.num_computed + n) - req.swapped_blocks)
                if self.pool.free - need < max(watermark, 0):
                    break
                req.blocks = self.pool.allocate(need)
                plan.h2d_bytes += req.swapped_blocks * self.block_bytes
                self.host.swap_in(req.swapped_blocks)
                self.stats.inc("swap_in_blocks", req.swapped_blocks)
                req.swapped_blocks = 0
            else:
                hashes = req.ensure_hashes(cfg.block_size) if (self.pool.enable_prefix_caching or cfg.kv_offload) else []
                limit = (req.total_len - 1) // cfg.block_size
                local = self.pool.cached_prefix(hashes[:limit])
                external = self.host.cached_prefix(hashes[:limit]) if cfg.kv_offload else 0
                if cfg.kv_offload_blocks:  # the host tier continues the GPU's hits where they stop
                    external = local + self.offload.cached_prefix(hashes[local:limit])
                hit_tokens = max(local, external) * cfg.block_size
                n = min(req.total_len - hit_tokens, budget)
                fresh = self._blocks_for(hit_tokens + n) - local
                revived = self.pool.idle_cached(hashes[:local])
                free_after = self.pool.free - revived - fresh
                if free_after < 0:
                    break
                if cfg.kv_reserve_full:
                    full = self._blocks_for(req.prompt_len + req.max_tokens) - local
                    if self.pool.free - revived - self._reserved_future() - full < watermark:
                        break
                elif free_after < watermark:
                    break
                req.blocks = self.pool.take_cached(hashes[:local]) + self.pool.allocate(fresh)
                req.registered = local
                req.num_computed = hit_tokens
                if external > local:
                    loaded = external - local
                    plan.h2d_bytes += loaded * self.block_bytes
                    self.stats.inc("offload_loaded_blocks", loaded)
                if cfg.enable_prefix_caching or cfg.kv_offload:
                    self.stats.inc("prefix_queries", req.total_len)
                    self.stats.inc("prefix_hits", local * cfg.block_size)
                    self.stats.inc("prefix_queries_blocks", len(hashes))
                    self.stats.inc("prefix_hits_blocks", local)
                    if cfg.kv_offload or cfg.kv_offload_blocks:
                        self.stats.inc("external_queries", req.total_len)
                        self.stats.inc("external_hits", max(0, external - local) * cfg.block_size)
                if req.first_scheduled is None:
                    req.cached_tokens = min(local * cfg.block_size, req.prompt_len)
                    req.external_tokens = min(max(0, external - local) * cfg.block_size, req.prompt_len)
            self.waiting.popleft()
            req.deferred = False
            if req.first_scheduled is None:
                req.first_scheduled = now
                self.stats.observe("queue", now - req.arrival)
            self.running.append(req)
            req.running = True
            plan.items.append(Scheduled(req, n, 0, prefill=not req.in_decode))
            budget -= n

    def _reserved_future(self) -> int:
        """Blocks running requests were promised (prompt + max_tokens) but do not hold yet."""
        return sum(max(0, self._blocks_for(r.prompt_len + r.max_tokens) - len(r.blocks)) for r in self.running)

    def _preempt(self, victim: SimRequest, plan: Plan, force_recompute: bool = False) -> None:
        cfg = self.config
        self.running.remove(victim)
        victim.running = False
        plan.items = [s for s in plan.items if s.request is not victim]
        n = len(victim.blocks)
        if cfg.preemption_mode == "swap" and not force_recompute and n and self.host.can_swap(n):
            plan.d2h_bytes += n * self.block_bytes
            self.host.swap_out(n)
            self.stats.inc("swap_out_blocks", n)
            victim.swapped_blocks = n
        else:
            self.stats.inc("retracted_input_tokens", victim.prompt_len)
            self.stats.inc("retracted_output_tokens", len(victim.output_ids))
            victim.num_computed = 0
            victim.registered = 0
        self.pool.release(victim.blocks)
        victim.blocks = []
        victim.preemptions += 1
        plan.preempted += 1
        self.stats.inc("preemptions")
        self.waiting.appendleft(victim)

    # ------------------------------------------------------------------ results
    def apply(self, plan: Plan, now: float) -> list[tuple[SimRequest, TokenEvent]]:
        """Advance every scheduled request by its tokens at model time ``now`` (the step's end)."""
        cfg = self.config
        stats = self.stats
        events: list[tuple[SimRequest, TokenEvent]] = []
        generated = {True: 0, False: 0}
        done: list[tuple[SimRequest, str]] = []
        for s in plan.items:
            req = s.request
            if req.aborted or not req.running:
                continue
            total = req.prompt_len + len(req.output_ids)
            if req.num_computed + s.tokens < total:
                req.num_computed += s.tokens
                self._register(req)
                continue
            accepted = self._draw_acceptance(s.draft_tokens) if s.draft_tokens else 0
            req.num_computed = total + accepted
            words: list[str] = []
            finish = None
            for _ in range(1 + accepted):
                word, tid = req.next_output_word()
                req.output_ids.append(tid)
                words.append(word)
                if len(req.output_ids) >= req.max_tokens or req.prompt_len + len(req.output_ids) >= cfg.max_model_len:
                    finish = "length"
                elif cfg.stop_probability and self.rng.random() < cfg.stop_probability:
                    finish = "stop"
                if finish:
                    break
            total = req.prompt_len + len(req.output_ids)
            req.num_computed = min(req.num_computed, total - 1)
            self.max_seq_len = max(self.max_seq_len, total)
            if s.draft_tokens:
                stats.sample("skipped_tokens", len(words) - 1)
            generated[req.streaming] += len(words)
            if req.first_token is None:
                req.first_token = now
                key = streaming_key(req.streaming)
                stats.observe("ttft", now - req.arrival, key)
                stats.inc("prompt_tokens", req.prompt_len, key)
                stats.inc("prompt_tokens_cached", req.cached_tokens)
                stats.inc("prompt_tokens_external", req.external_tokens)
                stats.inc("prompt_tokens_local_compute", req.prompt_len - req.cached_tokens - req.external_tokens)
                if req.first_scheduled is not None:
                    stats.observe("prefill", now - req.first_scheduled)
            elif req.last_token is not None:
                stats.observe("itl", now - req.last_token)
            req.last_token = now
            self._register(req)
            events.append((req, TokenEvent(" " + " ".join(words), len(words), finish)))
            if finish:
                done.append((req, finish))
        for flag, n in generated.items():
            if n:
                stats.inc("generation_tokens", n, streaming_key(flag))
        if done:
            for req, _ in done:
                req.running = False
            self.running = [r for r in self.running if r.running]
            for req, finish in done:
                self.pool.release(req.blocks)
                req.blocks = []
                self._finish(req, finish, now)
        return events

    def _draw_acceptance(self, k: int) -> int:
        """Accepted draft tokens: each accepted with probability p, stopping at the first reject."""
        p = self.config.spec_acceptance
        accepted = 0
        while accepted < k and self.rng.random() < p:
            self.stats.inc("spec_accepted_per_pos", labels={"position": str(accepted)})
            accepted += 1
        self.stats.inc("spec_drafts")
        self.stats.inc("spec_draft_tokens", k)
        self.stats.inc("spec_accepted_tokens", accepted)
        return accepted

    def _offload_evicted(self, block_hash: bytes) -> None:
        """A cached block the GPU pool evicts: with a host tier, copied there (device -> host over
        PCIe, paid by the next step) instead of lost."""
        if not self.config.kv_offload_blocks:
            return
        stored = self.offload.store((block_hash,))
        if stored:
            self._pending_d2h += stored * self.block_bytes
            self.stats.inc("offload_stored_blocks", stored)

    def _register(self, req: SimRequest) -> None:
        """Offer every newly completed full block of the request to the prefix cache."""
        cfg = self.config
        if not self.pool.enable_prefix_caching:
            return
        full = min(req.num_computed // cfg.block_size, len(req.blocks))
        if full <= req.registered:
            return
        hashes = req.ensure_hashes(cfg.block_size)
        for j in range(req.registered, min(full, len(hashes))):
            self.pool.register(req.blocks[j], hashes[j])
        req.registered = full

    def _finish(self, req: SimRequest, reason: str, now: float) -> None:
        req.finish_reason = reason
        req.finished_at = now
        streaming = str(req.streaming).lower()
        key = streaming_key(req.streaming)
        self.stats.inc("finished", labels={"reason": reason, "streaming": streaming})
        if self.config.kv_offload and reason != "abort":
            stored = self.host.store(req.ensure_hashes(self.config.block_size))
            self._pending_d2h += stored * self.block_bytes
            self.stats.inc("offload_stored_blocks", stored)
        if reason == "abort":
            return
        self.stats.observe("e2e", now - req.arrival, key)
        self.stats.observe("prompt_len", req.prompt_len)
        self.stats.observe("gen_len", len(req.output_ids))
        self.stats.observe("request_preemptions", req.preemptions)
        if req.first_scheduled is not None:
            self.stats.observe("inference", now - req.first_scheduled)
            self.stats.observe("mean_time_per_token", (now - req.first_scheduled) / max(1, len(req.output_ids)))
        if req.first_token is not None:
            self.stats.observe("decode", now - req.first_token)
            if len(req.output_ids) > 1:
                self.stats.observe("tpot", (now - req.first_token) / (len(req.output_ids) - 1), key)
