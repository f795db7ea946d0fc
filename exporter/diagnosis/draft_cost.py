"""Does the speculative draft pay for itself? Tokens per target step against what drafting costs.

Why a module of its own: acceptance alone does not say whether speculation helps. Each
target (verification) step emits ``1 + a`` tokens, ``a`` the draft tokens it accepted on
average; drafting the ``k`` tokens it verified cost ``k x c`` target steps, ``c`` one draft
token's cost relative to a target step. Decoding is memory-bound, so verifying ``k + 1``
tokens costs about what one token does, and speculation pays only while

    tokens per target step  1 + a  >  1 + k x c  target steps of work per step,

i.e. while the speed-up ``(1 + a) / (1 + k x c)`` is above 1. With ``a = acceptance x k``
that is "acceptance above ``c``": a draft whose tokens are mostly rejected may still pay
(cheap drafts), and one whose tokens are mostly accepted may not (an expensive draft).

Where each figure comes from, measured first:

* ``a`` — accepted draft tokens per verification step (``llm_spec_decode_accepted_tokens_total``
  over ``llm_spec_decode_drafts_total``, vLLM, llama.cpp, TGI), else acceptance x ``k``.
* ``k`` — draft tokens per verification step (``llm_spec_decode_draft_tokens_total`` over
  ``llm_spec_decode_drafts_total``), else the engine's launch setting
  ``llm_engine_setting{setting="num_speculative_tokens"}`` (exporter/engines/settings.py).
* ``k x c`` — from the share of each step the engine measured drafting
  (``llm_spec_decode_draft_time_ratio`` ``d``, trtllm-serve): drafting took ``d / (1 - d)``
  target steps; else ``k x spec_draft_token_cost`` (exporter/diagnosis/thresholds.py: a
  documented assumption, no engine here publishes the draft's time otherwise).

``signals.py`` calls ``draft_signals`` for the service view; the ``low_acceptance`` rule
calls ``draft_cost`` and ``describe``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter.diagnosis.window import Window
from exporter.schema import reduce_series, reduced_name

DRAFTS_METRIC = "llm_spec_decode_drafts_total"
DRAFT_TOKENS_METRIC = "llm_spec_decode_draft_tokens_total"
ACCEPTED_METRIC = "llm_spec_decode_accepted_tokens_total"
DRAFT_TIME_METRIC = "llm_spec_decode_draft_time_ratio"
SETTING_METRIC = "llm_engine_setting"
#: the families these signals read (the diagnosis window keeps them; the setting it keeps anyway)
READS: frozenset[str] = frozenset({DRAFTS_METRIC, DRAFT_TOKENS_METRIC, ACCEPTED_METRIC, DRAFT_TIME_METRIC})

#: the verification steps over the window
DRAFTS = f"increase({DRAFTS_METRIC})"
#: mean acceptance length: tokens one target step emits (the accepted drafts and its own)
TOKENS_PER_STEP = f"1 + increase({ACCEPTED_METRIC}) / increase({DRAFTS_METRIC})"
#: draft tokens each verification step checked, measured
DRAFT_TOKENS_PER_STEP = f"increase({DRAFT_TOKENS_METRIC}) / increase({DRAFTS_METRIC})"
#: draft tokens per step, as the engine was launched
SPEC_TOKENS_SETTING = reduced_name(SETTING_METRIC, '{setting="num_speculative_tokens"}')
#: the engine's measured share of a step spent drafting
DRAFT_TIME = reduced_name(DRAFT_TIME_METRIC)
#: the acceptance signal of signals.py (accepted over drafted tokens, over the window)
ACCEPTANCE = f"increase({ACCEPTED_METRIC}) / increase({DRAFT_TOKENS_METRIC})"
#: every signal of this module, for a rule's evidence
EVIDENCE: tuple[str, ...] = (TOKENS_PER_STEP, DRAFT_TOKENS_PER_STEP, SPEC_TOKENS_SETTING, DRAFT_TIME, DRAFTS)


@dataclass(frozen=True)
class DraftCost:
    """One window's arithmetic: what a target step yields and what its draft cost."""

    acceptance: float
    #: draft tokens per verification step, and whether measured ("measured") or the setting
    draft_tokens: float
    draft_tokens_from: str
    #: tokens one target step emits: 1 + accepted draft tokens per step
    tokens_per_step: float
    #: the draft's work per step, in target steps (k x c)
    cost: float
    #: one draft token's cost relative to a target step (c)
    token_cost: float
    #: "measured" (the engine's draft time share) or "assumed" (spec_draft_token_cost)
    cost_from: str
    #: the engine's share of a step spent drafting, where measured
    draft_time: float | None = None

    @property
    def speedup(self) -> float:
        """Tokens per unit of target-step work against plain decoding's 1."""
        return self.tokens_per_step / (1.0 + self.cost)

    @property
    def pays(self) -> bool:
        """The draft saves more target steps than it costs: 1 + a > 1 + k x c."""
        return self.tokens_per_step > 1.0 + self.cost


def draft_signals(window: Window, v: dict[str, float]) -> None:
    """Add the draft-cost signals the window supports to the service view ``v``."""
    drafts = window.counter_delta(DRAFTS_METRIC)
    if drafts is not None:
        v[DRAFTS] = drafts
        accepted = window.counter_delta(ACCEPTED_METRIC)
        drafted = window.counter_delta(DRAFT_TOKENS_METRIC)
        if drafts > 0 and accepted is not None:
            v[TOKENS_PER_STEP] = 1.0 + accepted / drafts
        if drafts > 0 and drafted is not None:
            v[DRAFT_TOKENS_PER_STEP] = drafted / drafts
    snap = window.latest
    if snap is None:
        return
    setting = reduce_series(SETTING_METRIC, snap.values(SETTING_METRIC, setting="num_speculative_tokens"))
    if setting is not None:
        v[SPEC_TOKENS_SETTING] = setting
    share = reduce_series(DRAFT_TIME_METRIC, snap.values(DRAFT_TIME_METRIC))
    if share is not None:
        v[DRAFT_TIME] = share


def draft_cost(v: Mapping[str, float], token_cost: float) -> DraftCost | None:
    """The arithmetic where the view holds it (acceptance and a number of draft tokens per
    step), else None. ``token_cost``: the assumed cost of one draft token in target steps."""
    acceptance = v.get(ACCEPTANCE)
    k, k_from = v.get(DRAFT_TOKENS_PER_STEP), "measured"
    if k is None or k <= 0:
        k, k_from = v.get(SPEC_TOKENS_SETTING), "setting"
    if acceptance is None or k is None or k <= 0:
        return None
    tokens = v.get(TOKENS_PER_STEP, 1.0 + acceptance * k)
    share = v.get(DRAFT_TIME)
    if share is not None and 0.0 <= share < 1.0:
        cost = share / (1.0 - share)
        return DraftCost(acceptance, k, k_from, tokens, cost, cost / k, "measured", share)
    return DraftCost(acceptance, k, k_from, tokens, k * token_cost, token_cost, "assumed")


def describe(dc: DraftCost) -> str:
    """The sentence with its numbers: acceptance, tokens per target step, the draft's cost, and
    whether the draft pays ("costs more than it saves" where 1 + a <= 1 + k x c)."""
    accepted = dc.tokens_per_step - 1.0
    where = "" if dc.draft_tokens_from == "measured" else " as launched"
    if dc.cost_from == "measured":
        why = f"drafting takes {_pct(dc.draft_time or 0.0)} of each step, measured"
    else:
        why = f"{dc.draft_tokens:.3g} draft tokens × {dc.token_cost:.2g} of a target step each, assumed"
    out = (
        f"{_pct(dc.acceptance)} of draft tokens accepted: {dc.tokens_per_step:.2f} tokens per target step "
        f"(1 + {accepted:.2f} accepted of {dc.draft_tokens:.3g} drafted{where}) against "
        f"1 + {dc.cost:.2f} = {1.0 + dc.cost:.2f} target steps of work ({why})"
    )
    if dc.pays:
        return f"{out}: the draft still pays (×{dc.speedup:.2f})"
    return f"{out}: the draft costs more than it saves (×{dc.speedup:.2f}, below 1 + cost)"


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"
