"""The tiny built-in tokenizer: byte-level BPE with no merges, i.e. one token per byte.

Built with the `tokenizers` library and wrapped as a transformers fast tokenizer with a ChatML
chat template. It is byte-level like Qwen's on purpose: transformers 5 loads a folder whose
model_type is qwen2 as Qwen2Tokenizer, which rebuilds a byte-level pipeline; a character-level
vocabulary silently lost newlines there. This one tokenizes identically under either class (a
test checks), and so under vLLM too.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
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
    '\nCall a tool with <tool_call>{"name": ..., "arguments": ...}</tool_call>.<|im_end|>\n'
    "{% elif messages[0].role == 'system' %}"
    "<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}{% if message.role != 'system' %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_tokenizer() -> PreTrainedTokenizerFast:
    byte_alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + byte_alphabet)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.add_special_tokens(SPECIAL_TOKENS)
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=IM_END,
        chat_template=CHAT_TEMPLATE,
        model_max_length=1024,
        clean_up_tokenization_spaces=False,
    )
