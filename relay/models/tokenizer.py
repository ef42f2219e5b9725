"""The tiny built-in tokenizer: one token per character, byte fallback for anything else.

Built with the `tokenizers` library (a BPE model with no merges is exactly a character
vocabulary) and wrapped as a transformers fast tokenizer with a ChatML chat template, so the
rest of relay treats it like any Hugging Face tokenizer.
"""
from __future__ import annotations

import string

from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [PAD, IM_START, IM_END]

# ChatML, the Qwen2.5 layout (tools listed in the system turn, tool results in a "tool" turn),
# so recipes move between the tiny model and real Qwen checkpoints without template changes.
CHAT_TEMPLATE = (
    "{% if tools %}"
    "<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}{% else %}You can call tools.{% endif %}"
    "\n\n# Tools\n<tools>{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>"
    "\nCall a tool with <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>.<|im_end|>\n"
    "{% elif messages[0].role == 'system' %}"
    "<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}{% if message.role != 'system' %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_tokenizer() -> PreTrainedTokenizerFast:
    chars = [c for c in string.printable if c not in "\x0b\x0c\r"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + chars + byte_tokens)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True, fuse_unk=False))
    core.add_special_tokens(SPECIAL_TOKENS)
    core.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, eos_token=IM_END, unk_token=None,
        chat_template=CHAT_TEMPLATE, model_max_length=1024, clean_up_tokenization_spaces=False,
    )
