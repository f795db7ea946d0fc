"""LLM / Speculative decoding: does drafting pay for itself?

Why acceptance length beside ITL: the acceptance ratio alone can look fine while
each step costs more; tokens per verification step against the inter-token
latency shows whether speculation speeds decoding up.
"""

from __future__ import annotations

from alerts.settings import Settings
from dashboards.grafana import ENGINE, Dashboard, Panel, Row, Target

UID = "llm-speculative"
LEGEND = "{{server}} {{model}}"


def build(s: Settings) -> Dashboard:
    w = s.rate_window
    items: list[Panel | Row] = [
        Row("Acceptance"),
        Panel(
            "Acceptance ratio",
            f"Draft tokens the target model accepted over those proposed ({w} rate ratio). Below ~0.5 drafting usually costs "
            "more than it saves: fewer speculative tokens, a closer draft model, or speculation off for this traffic.",
            [Target(f"server_model:llm_spec_decode_acceptance:ratio_rate{w}{{{ENGINE}}}", LEGEND)],
            unit="percentunit",
            min=0,
            max=1,
            thresholds=[(0.5, "orange")],
        ),
        Panel(
            "Acceptance length",
            "Mean tokens produced per verification step (1 + accepted per draft). Near 1 means speculation adds a draft "
            "pass per token for nothing; compare with the number of speculative tokens configured.",
            [Target(f"server_model:llm_spec_decode_acceptance_length:mean_rate{w}{{{ENGINE}}}", LEGEND)],
            min=1,
        ),
        Panel(
            "Draft and accepted tokens / s",
            "Proposed and accepted draft tokens per second. The gap is wasted draft and verification work; it grows with "
            "sampling temperature and prompt domains the draft model was not trained on.",
            [
                Target(
                    f"sum by (server, model) (rate(llm_spec_decode_draft_tokens_total{{{ENGINE}}}[$__rate_interval]))",
                    "draft " + LEGEND,
                ),
                Target(
                    f"sum by (server, model) (rate(llm_spec_decode_accepted_tokens_total{{{ENGINE}}}[$__rate_interval]))",
                    "accepted " + LEGEND,
                ),
            ],
            min=0,
        ),
        Panel(
            "ITL p95 vs acceptance length",
            "Inter-token latency p95 (left) against acceptance length (right, dashed). If ITL does not fall when acceptance "
            "length rises, the draft is too expensive; if ITL rises as acceptance falls, speculation is hurting.",
            [
                Target(f"server_model:llm_request_inter_token_seconds:p95_rate{w}{{{ENGINE}}}", "ITL p95 " + LEGEND),
                Target(f"server_model:llm_spec_decode_acceptance_length:mean_rate{w}{{{ENGINE}}}", "acceptance length " + LEGEND),
            ],
            unit="s",
            min=0,
            right_axis=("^acceptance length.*", "short"),
        ),
        Panel(
            "Verification steps / s",
            "Draft (verification) steps per second. Falling while load is steady means each step got slower: check the "
            "Hardware dashboard.",
            [Target(f"sum by (server, model) (rate(llm_spec_decode_drafts_total{{{ENGINE}}}[$__rate_interval]))", LEGEND)],
            min=0,
        ),
        Panel(
            "Acceptance length vs the draft's break-even",
            "Tokens per verification step (solid) against what drafting costs in target steps, 1 / (1 - draft time share) "
            "(dashed; only engines that measure their draft time, trtllm-serve). Below the dashed line the draft costs more "
            "than it saves. Without a measured share the diagnosis assumes 1 + draft tokens x spec_draft_token_cost "
            "(docs/diagnosis.md, low_acceptance).",
            [
                Target(f"server_model:llm_spec_decode_acceptance_length:mean_rate{w}{{{ENGINE}}}", "tokens/step " + LEGEND),
                Target(
                    f"1 / (1 - max by (server, model) (llm_spec_decode_draft_time_ratio{{{ENGINE}}}))",
                    "break-even " + LEGEND,
                ),
            ],
            min=1,
        ),
    ]
    return Dashboard(
        UID, "LLM / Speculative decoding", "Speculative decoding acceptance and whether it speeds decoding up.", items
    )
