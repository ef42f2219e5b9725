"""Load any Hugging Face causal LM folder (or hub name, where the network allows)."""

from __future__ import annotations

import torch

from relay.models.attention import EAGER_GROUPED, register_eager_grouped
from relay.models.resolve import model_folder

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def import_transformers():
    """transformers, imported on the first load: a process that only starts actors (the driver)
    never pays its seconds and memory."""
    import transformers

    transformers.utils.logging.disable_progress_bar()  # one bar per actor per load floods the driver log
    return transformers


def load_tokenizer(path: str, trust_remote_code: bool = False, key: str = "model.tokenizer_path"):
    path = model_folder(path, key)  # a GGUF file or short name: its converted folder; else `path` as is
    tokenizer = import_transformers().AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token_id is None:  # many base models ship without one
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def actor_device() -> torch.device:
    """The GPU this process was given, else the CPU. Ray sets CUDA_VISIBLE_DEVICES per actor
    (empty for actors that asked for no GPU), so the first visible device is this actor's."""
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def load_model(
    path: str,
    dtype: str = "float32",
    trust_remote_code: bool = False,
    key: str = "model.path",
    attn_implementation: str | None = None,
):
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    transformers = import_transformers()
    if attn_implementation == EAGER_GROUPED:
        register_eager_grouped()
    return transformers.AutoModelForCausalLM.from_pretrained(
        model_folder(path, key), dtype=DTYPES[dtype], trust_remote_code=trust_remote_code, **kwargs
    )
