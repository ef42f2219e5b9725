"""LoRA through peft (model.lora.*, relay/models/lora.py) on the Learner's class, used directly: what
trains, the reference with adapters off, the merged weights, the final folder, exact resume, and
bad target modules."""

import pytest
import ray
import torch
from transformers import AutoModelForCausalLM

import driver
from actors.learner import Learner
from relay.checkpoint.atomic import load_checkpoint, save_checkpoint
from relay.config import ConfigError, load_config
from relay.config.role_settings import PolicySettings
from relay.models.loading import load_model
from relay.models.lora import MERGED_FOLDER, adapter_state_dict, engine_state_dict, trainable_fraction
from relay.run.model_source import resolve_model_path
from relay.types import Batch, Sample
from relay.update.policy import compute_logprobs
from relay_trainer.pools import actor_roles

LORA = ["model.lora.rank=8", "training.lr=5e-3"]


def step_batch(step: int) -> Batch:
    g = torch.Generator().manual_seed(step)
    samples = []
    for i in range(6):
        n = 1 + (i + step) % 4
        prompt = torch.randint(3, 40, (2 + i % 3,), generator=g).tolist()
        response = torch.randint(3, 40, (n,), generator=g).tolist()
        samples.append(Sample(prompt, response, [0.0] * n, [1] * n, reward=float(i % 2), group_id=10 * step + i // 2))
    batch = Batch.from_samples(samples, pad_id=0)
    batch.advantages = ((torch.randn(batch.loss_mask.shape, generator=g) + 1.0) * batch.loss_mask).float()
    return batch


def train(learner: Learner, steps) -> list[dict]:
    out = []
    for step in steps:
        batch = step_batch(step)
        batch.old_logprobs = learner.compute_logprobs(batch)
        out.append(learner.update(batch))
    return out


def base_logprobs(path: str, batch: Batch) -> torch.Tensor:
    return compute_logprobs(load_model(path).eval(), batch, temperature=1.0)


def test_only_adapters_train_and_the_reference_is_the_base_model(tiny_model_path):
    learner = Learner(PolicySettings.of(load_config(None, LORA)), tiny_model_path, num_threads=1)
    batch = step_batch(0)
    base = base_logprobs(tiny_model_path, batch)
    # step 0: lora_B starts at zero, so the adapted policy is the base model too, up to float32
    # rounding (bit for bit on an AVX2 CPU; AVX-512 GEMM kernels differ by 4e-6 between batch layouts)
    reference = learner.compute_ref_logprobs(batch)
    torch.testing.assert_close(reference, base, rtol=0, atol=1e-5)
    torch.testing.assert_close(learner.compute_logprobs(batch), base, rtol=0, atol=1e-5)
    trainable = {n for n, p in learner.model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    frozen = {n: p.detach().clone() for n, p in learner.model.named_parameters() if not p.requires_grad}
    print(f"trainable fraction of the tiny model at rank 8: {trainable_fraction(learner.model):.4f}")
    train(learner, range(1, 3))
    assert all(torch.equal(p, frozen[n]) for n, p in learner.model.named_parameters() if n in frozen)
    state = learner.optimizer.state_dict()["state"]
    assert len(state) == len(trainable)  # optimizer moments for the adapters only
    # after training: the policy moved, the reference (adapters off) is still exactly the base
    assert not torch.allclose(learner.compute_logprobs(batch), base, rtol=0, atol=1e-3)
    assert torch.equal(learner.compute_ref_logprobs(batch), reference)


def test_merged_weights_give_a_plain_model_the_learners_logprobs(tiny_model_path):
    learner = Learner(PolicySettings.of(load_config(None, LORA)), tiny_model_path, num_threads=1)
    train(learner, range(1, 4))
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    merged = engine_state_dict(learner.model)
    plain = load_model(tiny_model_path).eval()
    assert merged.keys() == plain.state_dict().keys()  # the names the HF engine holds
    plain.load_state_dict(merged)
    batch = step_batch(9)
    diff = (compute_logprobs(plain, batch, 1.0) - learner.compute_logprobs(batch)).abs().max()
    print(f"merged plain model vs learner: max abs logprob difference {diff:.2e}")
    assert diff < 1e-4
    after = learner.model.state_dict()  # merging on the fly leaves the trained model as it was
    assert after.keys() == before.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_final_folder_is_a_peft_adapter_plus_a_merged_model(tiny_model_path, tmp_path):
    from peft import PeftModel

    learner = Learner(
        PolicySettings.of(load_config(None, [*LORA, "checkpoint.save_merged=true"])), tiny_model_path, num_threads=1
    )
    train(learner, range(1, 4))
    learner.save_hf(str(tmp_path / "final_model"), tiny_model_path)
    folder = tmp_path / "final_model"
    assert (folder / "adapter_config.json").is_file() and (folder / "adapter_model.safetensors").is_file()
    batch = step_batch(9)
    want = learner.compute_logprobs(batch)
    merged = AutoModelForCausalLM.from_pretrained(folder / MERGED_FOLDER, dtype=torch.float32).eval()
    diff = (compute_logprobs(merged, batch, 1.0) - want).abs().max()
    print(f"final merged model (plain transformers) vs learner: max abs logprob difference {diff:.2e}")
    assert diff < 1e-4
    adapted = PeftModel.from_pretrained(load_model(tiny_model_path), folder).eval()
    assert (compute_logprobs(adapted, batch, 1.0) - want).abs().max() < 1e-4
    assert (folder / MERGED_FOLDER / "tokenizer.json").is_file()


def test_lora_checkpoint_holds_adapters_and_resumes_exactly(tiny_model_path, tmp_path):
    cfg = load_config(None, [*LORA, "model.lora.dropout=0.1"])
    first = Learner(PolicySettings.of(cfg), tiny_model_path, num_threads=1)
    uninterrupted = train(first, range(1, 5))
    part = Learner(PolicySettings.of(cfg), tiny_model_path, num_threads=1)
    train(part, range(1, 3))
    groups, meta = part.state()
    assert all(".lora_" in name for name in groups["policy"])  # adapters only: the base is model.path's
    path = save_checkpoint(tmp_path, 2, groups, {"learner": meta})
    loaded_groups, state = load_checkpoint(path)
    resumed = Learner(PolicySettings.of(cfg), tiny_model_path, num_threads=1)
    resumed.load_state(loaded_groups, state["learner"])
    again = train(resumed, range(3, 5))
    for a, b in zip(uninterrupted[2:], again):
        for key in ("actor/loss", "actor/grad_norm", "actor/pg_loss"):
            assert a[key] == b[key], (key, a[key], b[key])
    with pytest.raises(ValueError, match="LoRA adapters"):  # full weights never load into adapters
        resumed.load_state({**loaded_groups, "policy": load_model(tiny_model_path).state_dict()}, state["learner"])


def test_lora_dropout_leaves_the_reported_logprobs_fixed(tiny_model_path):
    learner = Learner(
        PolicySettings.of(load_config(None, [*LORA, "model.lora.dropout=0.5"])), tiny_model_path, num_threads=1
    )
    train(learner, range(1, 2))
    batch = step_batch(5)
    assert torch.equal(learner.compute_logprobs(batch), learner.compute_logprobs(batch))


def test_lora_runs_start_no_reference_actor():
    kl = ["algorithm.kl_coef=0.01"]
    assert "reference" in actor_roles(load_config(None, kl))
    assert "reference" not in actor_roles(load_config(None, [*kl, "model.lora.rank=8"]))


def test_target_modules_matching_nothing_is_one_line_before_any_actor(capsys):
    cfg = load_config(None, ["model.lora.rank=8", "model.lora.target_modules=[q_proj,attn_qkv]"])
    with pytest.raises(ConfigError) as error:  # as the driver does, before Ray starts
        resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    assert len(error.value.problems) == 1
    line = error.value.problems[0]
    assert line.startswith("model.lora.target_modules: ['attn_qkv'] match no module")
    assert "q_proj" in line.split("module names:")[1] and "down_proj" in line
    code = driver.main(["model.lora.rank=4", "model.lora.target_modules=[nope]", "logging.console=false"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("relay:")]
    assert code == 2 and len(err) == 1 and "model.lora.target_modules" in err[0]
    assert not ray.is_initialized()


def test_lora_keys_are_checked():
    with pytest.raises(ConfigError) as error:
        load_config(
            None, ["model.lora.rank=-1", "model.lora.alpha=0", "model.lora.dropout=1.0", "checkpoint.save_merged=true"]
        )
    keys = sorted(p.split(":")[0] for p in error.value.problems)
    assert keys == ["checkpoint.save_merged", "model.lora.alpha", "model.lora.dropout", "model.lora.rank"]


def test_what_a_sync_sends_follows_the_engine_and_is_checked():
    lora = load_config(None, ["model.lora.rank=8"]).model.lora
    assert lora.sync == "auto" and not lora.sends_adapters("hf") and lora.sends_adapters("vllm")
    assert not load_config(None, ["model.lora.sync=merged"]).model.lora.sends_adapters("vllm")  # rank 0: no adapters
    with pytest.raises(ConfigError) as error:
        load_config(None, ["model.lora.rank=8", "model.lora.sync=adapter"])  # the HF engine
    assert [p.split(":")[0] for p in error.value.problems] == ["model.lora.sync"]
    with pytest.raises(ConfigError) as error:
        load_config(None, ["model.lora.rank=1024", "rollout.engine=vllm"])
    assert error.value.problems == [
        "model.lora.rank: the vllm engine serves adapters up to rank 512; use model.lora.sync=merged"
    ]


def test_adapter_weights_carry_peft_file_names(tiny_model_path):
    learner = Learner(PolicySettings.of(load_config(None, LORA)), tiny_model_path, num_threads=1)
    adapters = adapter_state_dict(learner.model)
    trainable = dict(learner.model.named_parameters())
    assert len(adapters) == sum(p.requires_grad for p in trainable.values())
    for name, tensor in adapters.items():
        assert ".lora_A.weight" in name or ".lora_B.weight" in name
        assert torch.equal(tensor, trainable[name.replace(".weight", ".default.weight")])
