"""relay.checkpoint.atomic: atomic save, verified load, pickle-free optimizer state, RNG, HF export."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from relay.checkpoint import atomic as checkpoint
from relay.checkpoint.atomic import (
    flatten_optimizer_state,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
    save_hf_model,
    unflatten_optimizer_state,
)
from relay.checkpoint.manifest import CheckpointCorruptError
from relay.checkpoint.rng import capture_rng, restore_rng


def small_groups() -> dict[str, dict[str, torch.Tensor]]:
    shared = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    return {
        "policy": {
            # Tied weights and a non-contiguous view: safetensors refuses both unless copied.
            "embed.weight": shared,
            "lm_head.weight": shared,
            "transposed": shared.t(),
            "bf16": torch.tensor([1.5, -2.25, 3.0e-3], dtype=torch.bfloat16),
        },
        "optimizer": {"step": torch.tensor(3.0), "ids": torch.tensor([1, 2, 3], dtype=torch.int64)},
    }


def test_round_trip_groups_and_state(tmp_path):
    groups = small_groups()
    state = {"step": 7, "data_position": 123, "config": {"lr": 1e-6, "name": "x"}, "kl": [0.1, None]}

    path = save_checkpoint(tmp_path, 7, groups, state)

    assert path == tmp_path / "step_00000007"
    assert sorted(p.name for p in path.iterdir()) == [
        "manifest.json",
        "optimizer.safetensors",
        "policy.safetensors",
        "state.json",
    ]
    loaded_groups, loaded_state = load_checkpoint(path)
    assert loaded_state == state
    assert loaded_groups.keys() == groups.keys()
    for name, tensors in groups.items():
        assert loaded_groups[name].keys() == tensors.keys()
        for key, tensor in tensors.items():
            assert loaded_groups[name][key].dtype == tensor.dtype
            assert torch.equal(loaded_groups[name][key], tensor)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["step"] == 7
    assert set(manifest["files"]) == {"policy.safetensors", "optimizer.safetensors", "state.json"}


def test_crash_mid_save_leaves_previous_checkpoint_latest(tmp_path, monkeypatch):
    first = save_checkpoint(tmp_path, 1, small_groups(), {"step": 1})
    real_write_json = checkpoint._write_json

    def crash_on_manifest(path, text):
        if path.name == "manifest.json":
            raise RuntimeError("simulated crash")
        real_write_json(path, text)

    monkeypatch.setattr(checkpoint, "_write_json", crash_on_manifest)
    with pytest.raises(RuntimeError, match="simulated crash"):
        save_checkpoint(tmp_path, 2, small_groups(), {"step": 2})

    assert not (tmp_path / "step_00000002").exists()
    assert latest_checkpoint(tmp_path) == first
    assert [p.name for p in tmp_path.iterdir()] == ["step_00000001"]


def test_leftovers_of_a_hard_crash_are_ignored_then_removed(tmp_path):
    first = save_checkpoint(tmp_path, 1, small_groups(), {"step": 1})
    # A killed process leaves its tmp folder behind (no except block ran).
    leftover = tmp_path / ".tmp-step_00000002-deadbeef"
    leftover.mkdir()
    (leftover / "policy.safetensors").write_bytes(b"partial")

    assert latest_checkpoint(tmp_path) == first
    save_checkpoint(tmp_path, 3, small_groups(), {"step": 3})
    assert not leftover.exists()


def test_keep_last_n_keeps_newest(tmp_path):
    for step in range(1, 5):
        save_checkpoint(tmp_path, step, small_groups(), {"step": step}, keep_last_n=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_00000003", "step_00000004"]
    assert latest_checkpoint(tmp_path) == tmp_path / "step_00000004"


def test_keep_last_n_never_deletes_the_checkpoint_just_written(tmp_path):
    save_checkpoint(tmp_path, 10, small_groups(), {"step": 10})
    older = save_checkpoint(tmp_path, 5, small_groups(), {"step": 5}, keep_last_n=1)
    assert older.exists()
    assert latest_checkpoint(tmp_path) == tmp_path / "step_00000010"


@pytest.mark.parametrize("keep_last_n", [0, -1])
def test_keep_last_n_below_one_is_rejected(tmp_path, keep_last_n):
    with pytest.raises(ValueError, match="keep_last_n"):
        save_checkpoint(tmp_path, 1, small_groups(), {}, keep_last_n=keep_last_n)
    assert latest_checkpoint(tmp_path) is None


def test_saving_an_existing_step_refuses_and_keeps_it(tmp_path):
    path = save_checkpoint(tmp_path, 1, small_groups(), {"step": 1})
    with pytest.raises(FileExistsError):
        save_checkpoint(tmp_path, 1, small_groups(), {"step": "other"})
    assert load_checkpoint(path)[1] == {"step": 1}


def test_latest_checkpoint_of_missing_or_empty_root(tmp_path):
    assert latest_checkpoint(tmp_path / "nope") is None
    (tmp_path / "step_00000009").mkdir()  # no manifest: not a complete checkpoint
    assert latest_checkpoint(tmp_path) is None


def flip_one_byte(path):
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # inside the tensor data, past the header
    path.write_bytes(bytes(data))


def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[:-5])


@pytest.mark.parametrize(
    "filename, damage, problem",
    [
        ("policy.safetensors", flip_one_byte, "sha256 mismatch"),
        ("optimizer.safetensors", truncate, "truncated"),
        ("state.json", lambda path: path.unlink(), "missing"),
    ],
)
def test_damaged_file_is_named(tmp_path, filename, damage, problem):
    path = save_checkpoint(tmp_path, 4, small_groups(), {"step": 4})
    damage(path / filename)

    with pytest.raises(CheckpointCorruptError) as error:
        load_checkpoint(path)
    message = str(error.value)
    assert str(path / filename) in message
    assert problem in message
    assert message.count("\n") == 0  # only the damaged file is reported


def test_missing_manifest_is_named(tmp_path):
    path = save_checkpoint(tmp_path, 4, small_groups(), {"step": 4})
    (path / "manifest.json").unlink()
    with pytest.raises(CheckpointCorruptError, match="manifest.json: missing"):
        load_checkpoint(path)


def test_flatten_keeps_tuples_int_keys_and_tensor_places():
    state_dict = {
        "state": {0: {"step": torch.tensor(2.0), "exp_avg": torch.ones(3)}, 5: {}},
        "param_groups": [{"lr": 0.1, "betas": (0.9, 0.95), "foreach": None, "params": [0, 5]}],
        "odd": {"__tensor__": "not a tag here"},
    }
    tensors, skeleton = flatten_optimizer_state(state_dict)
    skeleton = json.loads(json.dumps(skeleton))  # as it travels in state.json

    restored = unflatten_optimizer_state(tensors, skeleton)

    assert set(tensors) == {"state.0.step", "state.0.exp_avg"}
    assert restored["param_groups"][0]["betas"] == (0.9, 0.95)
    assert list(restored["state"]) == [0, 5]
    assert restored["odd"] == {"__tensor__": "not a tag here"}
    assert restored["state"][0]["exp_avg"] is tensors["state.0.exp_avg"]


def make_model_and_optimizer(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.8, 0.95), weight_decay=0.1)
    return model, optimizer


def train_steps(model, optimizer, n: int) -> None:
    for _ in range(n):
        # The batch comes from the global torch RNG, so the continuation also tests restore_rng.
        x = torch.randn(16, 4)
        loss = (model(x) - x[:, :2]).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_optimizer_and_rng_restore_continue_bit_identically(tmp_path):
    model, optimizer = make_model_and_optimizer(seed=0)
    train_steps(model, optimizer, 3)
    opt_tensors, opt_skeleton = flatten_optimizer_state(optimizer.state_dict())
    path = save_checkpoint(
        tmp_path,
        3,
        {"policy": model.state_dict(), "optimizer": opt_tensors},
        {"step": 3, "optimizer": opt_skeleton, "rng": capture_rng()},
    )
    train_steps(model, optimizer, 2)

    # A fresh process: different init and hyperparameters, all of which the checkpoint overrides.
    fresh_model, _ = make_model_and_optimizer(seed=123)
    fresh_optimizer = torch.optim.AdamW(fresh_model.parameters(), lr=1.0)
    groups, state = load_checkpoint(path)
    fresh_model.load_state_dict(groups["policy"])
    fresh_optimizer.load_state_dict(unflatten_optimizer_state(groups["optimizer"], state["optimizer"]))
    restore_rng(state["rng"])
    train_steps(fresh_model, fresh_optimizer, 2)

    assert fresh_optimizer.param_groups[0]["betas"] == (0.8, 0.95)
    for (name, expected), actual in zip(model.named_parameters(), fresh_model.parameters()):
        assert torch.equal(expected, actual), name


def test_rng_restore_repeats_every_generator():
    random.gauss(0, 1)  # leaves a cached gaussian in both generators: part of the state too
    np.random.randn()
    rng = json.loads(json.dumps(capture_rng()))

    def draw():
        return (
            random.random(),
            random.gauss(0, 1),
            np.random.rand(3).tolist(),
            np.random.randn(),
            torch.rand(3).tolist(),
            torch.randint(0, 1000, (4,)).tolist(),
        )

    first = draw()
    restore_rng(rng)
    assert draw() == first


def tiny_qwen():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config).eval()


def tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, **{chr(ord("a") + i): i + 1 for i in range(26)}}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>")


def test_save_hf_model_loads_with_transformers(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = tiny_qwen(), tiny_tokenizer()
    folder = save_hf_model(model, tokenizer, tmp_path / "final")
    save_hf_model(model, tokenizer, folder)  # replacing an existing export works too

    assert (folder / "model.safetensors").is_file()
    assert not list(folder.glob("*.bin"))
    assert [p.name for p in tmp_path.iterdir()] == ["final"]  # no tmp / old folders left
    loaded = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = torch.tensor([[1, 5, 9, 2, 7]])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)
    assert AutoTokenizer.from_pretrained(folder)("abc")["input_ids"] == tokenizer("abc")["input_ids"]


def test_tied_policy_round_trips_through_a_checkpoint(tmp_path):
    model = tiny_qwen().to(torch.bfloat16)
    path = save_checkpoint(tmp_path, 1, {"policy": model.state_dict()}, {"step": 1})
    restored = tiny_qwen().to(torch.bfloat16)
    torch.nn.init.zeros_(restored.model.embed_tokens.weight)

    restored.load_state_dict(load_checkpoint(path)[0]["policy"])

    for (name, expected), actual in zip(model.state_dict().items(), restored.state_dict().values()):
        assert torch.equal(expected, actual), name
