"""Small GGUF files for tests, written with the gguf package's own writer: a tiny llama (hidden 64,
2 layers, tied embeddings) with a byte-level BPE vocabulary (tokenizer.ggml.*) and a ChatML template
that adds a default system prompt, as SmolLM2-135M-Instruct's does. About 0.4 MB."""

from __future__ import annotations

from pathlib import Path

import numpy as np

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "Ġ a", "h e", "i n"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a tiny test model.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def byte_alphabet() -> list[str]:
    """GPT-2's printable spelling of the 256 bytes, in byte order (what byte-level BPE vocabularies hold)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    spelled, extra = {}, 0
    for b in range(256):
        if b in printable:
            spelled[b] = chr(b)
        else:
            spelled[b], extra = chr(256 + extra), extra + 1
    return [spelled[b] for b in range(256)]


def write_tiny_gguf(path: Path, seed: int = 0, hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2):
    import gguf

    rng = np.random.default_rng(seed)
    tokens = SPECIALS + byte_alphabet() + [m.replace(" ", "") for m in MERGES]
    head_dim, ff = hidden // heads, 2 * hidden
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_name("relay test llama")
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(head_dim)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS)))  # 3: control (special)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)
    w.add_chat_template(CHAT_TEMPLATE)

    def weight(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    w.add_tensor("token_embd.weight", weight(len(tokens), hidden))  # no output.weight: tied embeddings
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", weight(hidden, hidden))
        w.add_tensor(f"blk.{i}.attn_k.weight", weight(kv_heads * head_dim, hidden))
        w.add_tensor(f"blk.{i}.attn_v.weight", weight(kv_heads * head_dim, hidden))
        w.add_tensor(f"blk.{i}.attn_output.weight", weight(hidden, hidden))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", weight(ff, hidden))
        w.add_tensor(f"blk.{i}.ffn_up.weight", weight(ff, hidden))
        w.add_tensor(f"blk.{i}.ffn_down.weight", weight(hidden, ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
