"""LoRA adapters on the policy through `peft` (model.lora.rank > 0).

The Learner wraps its model with `peft.get_peft_model`: the base weights are frozen, only the
adapters (lora_A, lora_B of each targeted projection) train and hold optimizer state. The same
model serves as the reference policy with its adapters switched off (`PeftModel.disable_adapter`),
so a run with LoRA and a KL term holds one copy of the base weights and no Reference actor.

What leaves the learner:
- to the rollout engines: the merged weights under the plain Hugging Face names the engine holds
  (`engine_state_dict`), computed per send from the base weight and the adapter product; the
  trained model itself is never merged (its adapters keep training); or, to vLLM
  (model.lora.sync), the adapters alone (`adapter_state_dict`), which vLLM serves on the base;
- to checkpoints: the adapters only (`trainable_state_dict`); the base comes from model.path;
- at the end: a peft adapter folder, plus a merged Hugging Face model in `merged/` with
  checkpoint.save_merged (`LoraFolderWriter`).

A sharded learner (FSDP2) holds DTensor shards: every tensor is read through `full`, a collective
that every rank runs in the same order.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from relay.config import ModelConfig
from relay.config.lora import LoraConfig
from relay.weights.transfer import full, unique_tensors

ADAPTER = "default"  # peft's name of the one adapter get_peft_model adds
MERGED_FOLDER = "merged"  # the merged Hugging Face model inside the final adapter folder


def is_lora(model: torch.nn.Module) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def attach_adapters(model: torch.nn.Module, lora: LoraConfig) -> torch.nn.Module:
    """The model wrapped by peft with fresh LoRA adapters (lora_B zero: the wrapped model computes
    exactly what the base does until the first update); the base parameters are frozen."""
    import peft

    config = peft.LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=_peft_targets(lora.target_modules),
        bias="none",
    )
    model = peft.get_peft_model(model, config)
    if lora.dropout:
        for name, module in model.named_modules():
            if ".lora_dropout." in name + ".":
                module.register_forward_pre_hook(_dropout_in_graph_passes)
    return model


def _dropout_in_graph_passes(module: torch.nn.Module, args) -> None:
    """LoRA dropout acts in the passes that build a graph (the update's) and never in no-grad ones
    (logprobs): the learner's model stays in eval mode, so the logprobs it reports for the same
    weights never vary (activation checkpointing's recompute restores the RNG: the same mask)."""
    module.train(torch.is_grad_enabled())


def _peft_targets(target_modules: tuple[str, ...]) -> str | list[str]:
    # peft takes "all-linear" only as a plain string (every linear layer but the output head)
    return "all-linear" if tuple(target_modules) == ("all-linear",) else list(target_modules)


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """What the optimizer steps: every parameter without LoRA, the adapters with it."""
    return [p for p in model.parameters() if p.requires_grad]


def trainable_fraction(model: torch.nn.Module) -> float:
    unique = {id(p): p for p in model.parameters()}.values()  # tied weights once
    return sum(p.numel() for p in unique if p.requires_grad) / sum(p.numel() for p in unique)


@contextlib.contextmanager
def adapters_disabled(model: torch.nn.Module):
    """The base model's forward passes (the reference policy): peft's disable_adapter."""
    with model.disable_adapter():
        yield


# -- weights out: the engine's names, the adapters merged in ----------------------------------


def engine_state_dict(model: torch.nn.Module, keep_vars: bool = False) -> dict[str, torch.Tensor]:
    """The weights the rollout engine loads, under the names of the plain Hugging Face model: the
    model's own state dict without LoRA; with it, base + scaling * B @ A for every adapted layer
    (peft's get_delta_weight on the full tensors), the other tensors as they are. Tied weights stay
    one tensor (sent once). Nothing in the model changes."""
    if not is_lora(model):
        return model.state_dict(keep_vars=keep_vars)
    from peft.tuners.lora import LoraLayer
    from peft.utils.other import transpose

    base = model.get_base_model()
    layers = {name: m for name, m in base.named_modules() if isinstance(m, LoraLayer)}
    gathered: dict[int, torch.Tensor] = {}  # id(tensor) -> full tensor: tied names share one result

    def whole(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in gathered:
            gathered[id(t)] = full(t)
        return gathered[id(t)]

    out = {}
    with torch.no_grad():
        for name, tensor in base.state_dict(keep_vars=True).items():
            if ".lora_" in name:
                continue
            module, _, leaf = name.rpartition(".")
            if module.endswith(".base_layer"):
                module = module[: -len(".base_layer")]
                layer = layers[module]
                value = whole(tensor)
                if leaf == "weight" and ADAPTER in layer.lora_A:
                    a, b = whole(layer.lora_A[ADAPTER].weight), whole(layer.lora_B[ADAPTER].weight)
                    delta = transpose(b.float() @ a.float(), layer.fan_in_fan_out) * layer.scaling[ADAPTER]
                    value = (value.float() + delta).to(value.dtype)
                out[f"{module}.{leaf}"] = value
            else:
                out[name] = whole(tensor)
    return out


def adapter_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapters alone, under the names of a peft adapter file (`...q_proj.lora_A.weight`: the
    adapter's name left out), read through `full`: what a sync sends with model.lora.sync=adapter."""
    return {
        name.replace(f".{ADAPTER}.", "."): full(t)
        for name, t in model.state_dict(keep_vars=True).items()
        if ".lora_" in name
    }


def engine_weights(model: torch.nn.Module, adapters_only: bool, keep_vars: bool = False) -> dict[str, torch.Tensor]:
    return adapter_state_dict(model) if adapters_only else engine_state_dict(model, keep_vars)


# -- checkpoints: the adapters only ------------------------------------------------------------


def trainable_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What a checkpoint holds of the policy: its whole state dict without LoRA, the adapters with it."""
    if not is_lora(model):
        return model.state_dict()
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def load_trainable_state(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Inverse of trainable_state_dict; a checkpoint of another shape (full weights into a LoRA
    model, another rank or targets) raises, naming the first mismatching keys."""
    if not is_lora(model):
        model.load_state_dict(tensors, strict=True)
        return
    want = {name for name, p in model.named_parameters() if p.requires_grad}
    if missing := sorted(want - tensors.keys()) + sorted(tensors.keys() - want):
        raise ValueError(
            f"the checkpoint's policy is not this model's LoRA adapters (model.lora.*): first mismatches {missing[:4]}"
        )
    model.load_state_dict(tensors, strict=False)


# -- the final folder --------------------------------------------------------------------------


class LoraFolderWriter:
    """Stands in for the model in relay.checkpoint.atomic.save_hf_model: `save_pretrained` writes the peft
    adapter folder (adapter_config.json, adapter_model.safetensors) and, given merged weights, a
    plain Hugging Face model in its `merged/` subfolder (with the tokenizer). Takes full tensors:
    on a sharded learner every rank gathers them, rank 0 writes."""

    def __init__(self, model, adapters: dict[str, torch.Tensor], merged: dict[str, torch.Tensor] | None, tokenizer):
        self.model, self.adapters, self.merged, self.tokenizer = model, adapters, merged, tokenizer

    def save_pretrained(self, folder: str | Path) -> None:
        from safetensors.torch import save_file

        self.model.save_pretrained(str(folder), state_dict=self.adapters)
        if self.merged is None:
            return
        merged = Path(folder) / MERGED_FOLDER
        merged.mkdir(parents=True, exist_ok=True)
        base = self.model.get_base_model()
        base.config.save_pretrained(merged)
        if getattr(base, "generation_config", None) is not None:
            base.generation_config.save_pretrained(merged)
        tensors = {k: v.detach().cpu().contiguous() for k, v in unique_tensors(self.merged)[0].items()}
        save_file(tensors, str(merged / "model.safetensors"), metadata={"format": "pt"})
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(merged)


def final_folder_writer(model, with_merged: bool, tokenizer, write: bool) -> LoraFolderWriter | None:
    """Every rank calls this (the gathers are collectives); the writer on the rank that writes."""
    adapters = {name: full(t).cpu() for name, t in model.state_dict(keep_vars=True).items() if ".lora_" in name}
    merged = engine_state_dict(model, keep_vars=True) if with_merged else None
    return LoraFolderWriter(model, adapters, merged, tokenizer) if write else None


# -- config check against the model ---------------------------------------------------------------


def target_module_problem(model: ModelConfig, path: str) -> str | None:
    """None, or one line when model.lora.target_modules match no module of the model at `path`
    (read from its config on the meta device: no weights are loaded), listing its module names."""
    lora = model.lora
    if lora.rank <= 0 or not lora.target_modules or tuple(lora.target_modules) == ("all-linear",):
        return None
    names = _module_names(path, model.trust_remote_code)
    if names is None:
        return None
    matched = {t for t in lora.target_modules for n in names if n == t or n.endswith("." + t)}
    if not (unmatched := [t for t in lora.target_modules if t not in matched]):
        return None
    leaves = sorted({n.rpartition(".")[2] for n in names if n and not n.rpartition(".")[2].isdigit()})
    return (
        f"model.lora.target_modules: {unmatched} match no module of {model.path}; its module names: {', '.join(leaves)}"
    )


def _module_names(path: str, trust_remote_code: bool) -> list[str] | None:
    """The model's module names, from its config alone; None where the config cannot be read here
    (the learner reports that itself when it loads the model)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    except Exception:  # an unreadable model is reported where it is loaded
        return None
    return [name for name, _ in model.named_modules()]
