"""Build the shipped reward model for the built-in arithmetic task: `python -m relay.models.build_rm`.

The shipped tiny policy answers sampled addition prompts (temperature 1, as in training); the
exact-answer rule labels each answer right or wrong; a sequence classifier with one label,
started from the tiny policy's own weights (a fresh score head), learns to tell them apart with a
logistic loss on its logit. The tiny policy's mistakes are mostly a dropped ones carry
(17+25 -> 32), so the reward model has to learn carrying to score well. It reads each answer
exactly as a RewardModel actor does: the conversation rendered with its own chat template.

Writes relay/models/shipped/tiny-rm and its manifest entry, with the model's accuracy on answers
to held-out prompts. One thread and fixed seeds: the same machine rebuilds the same bits.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from relay.envs.arithmetic import arithmetic_reward, make_rows
from relay.models.build import HELD_OUT_SEED, record, save_folder
from relay.models.loading import load_tokenizer
from relay.models.shipped import BASE, RM_NAME, SHIPPED_DIR, shipped_model
from relay.models.tiny import encode_chat
from relay.reward_model import conversation
from relay.types import Sample

RECIPE = {
    "seed": 0,
    "train_prompts": 2000,  # x answers_per_prompt sampled answers, deduplicated per prompt
    "answers_per_prompt": 8,
    "eval_prompts": 256,
    "steps": 1500,
    "batch": 64,
    "lr": 1e-3,
    "digits": 2,
    "max_new_tokens": 6,
}
TRAIN_SEED = 3_000_017  # prompts neither the tiny model's warm start nor any held-out set uses


@torch.no_grad()
def sample_answers(policy, tokenizer, rows: list[dict], n: int, seed: int) -> list[tuple[dict, str]]:
    """n sampled answers per row at temperature 1, decoded as a rollout decodes them."""
    torch.manual_seed(seed)
    out = []
    for start in range(0, len(rows), 128):
        chunk = rows[start : start + 128]
        prompts = [encode_chat(tokenizer, r["prompt"]) for r in chunk]
        width = max(map(len, prompts))
        ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
        gen = policy.generate(
            input_ids=ids,
            attention_mask=(ids != tokenizer.pad_token_id).long(),
            max_new_tokens=RECIPE["max_new_tokens"],
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            num_return_sequences=n,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        texts = tokenizer.batch_decode(gen[:, width:], skip_special_tokens=True)
        out += [(chunk[i // n], text) for i, text in enumerate(texts)]
    return out


def as_sample(row: dict, answer: str) -> Sample:
    """What a rollout of the single-turn arithmetic task hands a reward model."""
    messages = [{"role": "user", "content": row["prompt"]}]
    return Sample(
        prompt_ids=[],
        response_text=answer,
        final_text=answer,
        ground_truth=row["ground_truth"],
        meta={"messages": messages},
    )


def encode(tokenizer, samples: list[Sample]) -> list[list[int]]:
    texts = [tokenizer.apply_chat_template(conversation(s), tokenize=False) for s in samples]
    return [tokenizer(t, add_special_tokens=False).input_ids for t in texts]


def labelled(pairs: list[tuple[dict, str]]) -> tuple[list[Sample], list[float]]:
    seen, samples, labels = set(), [], []
    for row, answer in pairs:
        if (row["prompt"], answer) in seen:
            continue
        seen.add((row["prompt"], answer))
        s = as_sample(row, answer)
        samples.append(s)
        labels.append(arithmetic_reward(s))
    return samples, labels


def logits(model, rows: list[list[int]], pad_id: int) -> torch.Tensor:
    width = max(map(len, rows))
    ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return model(input_ids=ids, attention_mask=mask).logits[:, 0]


@torch.no_grad()
def accuracy(model, rows: list[list[int]], labels: list[float], pad_id: int) -> dict[str, float]:
    """Share of answers the sign of the logit classifies right, per class and in all."""
    model.eval()
    scores = torch.cat([logits(model, rows[i : i + 256], pad_id) for i in range(0, len(rows), 256)])
    truth = torch.tensor(labels) > 0.5
    guess = scores > 0
    return {
        "accuracy": (guess == truth).float().mean().item(),
        "accuracy_on_right_answers": (guess[truth]).float().mean().item(),
        "accuracy_on_wrong_answers": (~guess[~truth]).float().mean().item(),
        "right_share": truth.float().mean().item(),
        "answers": len(labels),
    }


def build(out: Path) -> dict:
    start = time.perf_counter()
    r = RECIPE
    base = shipped_model(BASE)
    tokenizer = load_tokenizer(str(base))
    policy = AutoModelForCausalLM.from_pretrained(base).eval()
    train_pairs = sample_answers(
        policy, tokenizer, make_rows(r["train_prompts"], TRAIN_SEED, r["digits"]), r["answers_per_prompt"], r["seed"]
    )
    eval_pairs = sample_answers(
        policy, tokenizer, make_rows(r["eval_prompts"], HELD_OUT_SEED, r["digits"]), r["answers_per_prompt"], 1
    )
    train_samples, train_labels = labelled(train_pairs)
    eval_samples, eval_labels = labelled(eval_pairs)
    train_rows, eval_rows = encode(tokenizer, train_samples), encode(tokenizer, eval_samples)
    print(f"build_rm: {len(train_rows)} distinct training answers, {sum(train_labels):.0f} right", flush=True)

    torch.manual_seed(r["seed"])
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1)  # a fresh score head
    model.config.pad_token_id = tokenizer.pad_token_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=r["lr"], weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=r["lr"], total_steps=r["steps"], pct_start=0.05)
    rng = random.Random(r["seed"])
    order: list[int] = []
    model.train()
    for step in range(r["steps"]):
        if len(order) < r["batch"]:
            order += rng.sample(range(len(train_rows)), len(train_rows))
        idx, order = order[: r["batch"]], order[r["batch"] :]
        target = torch.tensor([train_labels[i] for i in idx])
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            logits(model, [train_rows[i] for i in idx], tokenizer.pad_token_id), target
        )
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if (step + 1) % 250 == 0:
            print(f"build_rm: step {step + 1}/{r['steps']} loss {loss.item():.4f}", flush=True)
    model.eval()
    held_out = accuracy(model, eval_rows, eval_labels, tokenizer.pad_token_id)
    files = save_folder(model, tokenizer, out / RM_NAME)
    entry = {
        "recipe": {"builder": "relay.models.build_rm", "base": BASE, **r},
        "files": files,
        "held_out": held_out,
        "train_accuracy": accuracy(model, train_rows[:2048], train_labels[:2048], tokenizer.pad_token_id)["accuracy"],
    }
    record(out, RM_NAME, entry)
    print(
        f"build_rm: {out / RM_NAME} in {time.perf_counter() - start:.0f} s; held-out answers "
        f"{held_out['answers']} ({held_out['right_share']:.2f} right): accuracy {held_out['accuracy']:.3f} "
        f"(right answers {held_out['accuracy_on_right_answers']:.3f}, wrong {held_out['accuracy_on_wrong_answers']:.3f})",
        flush=True,
    )
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=SHIPPED_DIR, help=f"folder to write (default: {SHIPPED_DIR})")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # one reduction order: rebuilds on one machine are bit-identical
    build(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
