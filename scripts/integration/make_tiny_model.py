"""Write a tiny random-weight Llama model + tokenizer that vLLM (CPU) can serve.

Nothing is downloaded: the weights are random (fixed seed) and the tokenizer is a
byte-level BPE trained here on a generated corpus, so any text tokenizes.

    python make_tiny_model.py OUT_DIR

Shape (tiny_model_spec.py, shared with make_tiny_gguf.py): hidden 128, intermediate 256,
2 layers, 4 attention heads, 2 KV heads, so the head size is 32 -- the smallest the vLLM CPU
attention backend accepts.
Run it with the vLLM venv's python (it needs torch, transformers, tokenizers).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tiny_model_spec import CORPUS_WORDS, HEAD_DIM, HEADS, HIDDEN, INTERMEDIATE, KV_HEADS, LAYERS

if TYPE_CHECKING:  # the vLLM venv's (not .venv's: mypy reads it as Any there)
    from transformers import PreTrainedTokenizerFast

VOCAB_SIZE = 512
MAX_POSITIONS = 512
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}{{ eos_token }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _corpus(n_lines: int = 2000) -> list[str]:
    rng = random.Random(1234)
    letters = "abcdefghijklmnopqrstuvwxyz0123456789 .,:;!?-_()[]{}'\"\n"
    lines = []
    for _ in range(n_lines):
        lines.append(" ".join(rng.choice(CORPUS_WORDS) for _ in range(rng.randint(3, 12))))
        lines.append("".join(rng.choice(letters) for _ in range(rng.randint(5, 40))))
    return lines


def make_tokenizer(out: Path) -> PreTrainedTokenizerFast:
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=["<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=MAX_POSITIONS,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def make_model(out: Path, tokenizer: PreTrainedTokenizerFast) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    ).save_pretrained(out)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(out)
    make_model(out, tokenizer)
    info = {"vocab_size": len(tokenizer), "files": sorted(p.name for p in out.iterdir())}
    print(json.dumps(info), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
