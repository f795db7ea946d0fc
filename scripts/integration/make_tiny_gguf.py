"""Write a tiny random-weight llama-architecture GGUF that llama.cpp's server can load.

llama.cpp's converter rejects a locally trained tokenizer, so the file is written
directly with the `gguf` package: an SPM ("llama") vocabulary of <unk>/<s>/</s>, the
256 byte-fallback tokens and a few hundred word pieces, and random F32 tensors
(fixed seed).

    python make_tiny_gguf.py OUT.gguf

Shape (tiny_model_spec.py, shared with make_tiny_model.py): n_embd 128, n_ff 256, 2 layers,
4 heads, 2 KV heads (head size 32); context 2048.
"""

from __future__ import annotations

import sys

import numpy as np
from gguf import GGUFWriter, TokenType
from tiny_model_spec import HEAD_DIM, HEADS, HIDDEN, INTERMEDIATE, KV_HEADS, LAYERS, WORDS

N_CTX_TRAIN = 2048


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>"]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(TokenType.BYTE)
    pieces: list[str] = []
    for w in WORDS:
        pieces += ["\u2581" + w, w]
    for c in "abcdefghijklmnopqrstuvwxyz0123456789":
        pieces += ["\u2581" + c, c]
    seen = set(tokens)
    for p in pieces:
        if p not in seen:
            seen.add(p)
            tokens.append(p)
            types.append(TokenType.NORMAL)
    # SPM merges by score: longer pieces first.
    scores = [0.0] * 259 + [-1000.0 + len(t) for t in tokens[259:]]
    return tokens, scores, [int(t) for t in types]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    tokens, scores, types = vocabulary()
    n_vocab = len(tokens)
    rng = np.random.default_rng(0)

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    w = GGUFWriter(argv[1], "llama")
    w.add_name("tiny-random-llama")
    w.add_file_type(0)  # ALL_F32
    w.add_context_length(N_CTX_TRAIN)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(INTERMEDIATE)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)

    # numpy shape is (rows, cols) = (out, in); GGUF stores it as ne = [in, out].
    w.add_tensor("token_embd.weight", rand(n_vocab, HIDDEN))
    w.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    w.add_tensor("output.weight", rand(n_vocab, HIDDEN))
    for i in range(LAYERS):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", rand(HEADS * HEAD_DIM, HIDDEN))
        w.add_tensor(p + "attn_k.weight", rand(KV_HEADS * HEAD_DIM, HIDDEN))
        w.add_tensor(p + "attn_v.weight", rand(KV_HEADS * HEAD_DIM, HIDDEN))
        w.add_tensor(p + "attn_output.weight", rand(HIDDEN, HEADS * HEAD_DIM))
        w.add_tensor(p + "ffn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", rand(INTERMEDIATE, HIDDEN))
        w.add_tensor(p + "ffn_up.weight", rand(INTERMEDIATE, HIDDEN))
        w.add_tensor(p + "ffn_down.weight", rand(HIDDEN, INTERMEDIATE))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {argv[1]}: vocab {n_vocab}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
