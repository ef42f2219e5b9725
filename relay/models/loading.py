"""Load any Hugging Face causal LM folder (or hub name, where the network allows)."""
from __future__ import annotations

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

transformers.utils.logging.disable_progress_bar()  # one bar per actor per load floods the driver log

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_tokenizer(path: str, trust_remote_code: bool = False):
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token_id is None:  # many base models ship without one
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(path: str, dtype: str = "float32", trust_remote_code: bool = False):
    return AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code)
