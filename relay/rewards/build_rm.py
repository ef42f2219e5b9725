"""Build the shipped reward model for the built-in arithmetic task: `python -m relay.rewards.build_rm`.

The shipped tiny policy answers sampled addition prompts (temperature 1, as in training); each
prompt's right answer, the wrong answers next to it (NEIGHBOURS), its format violations and the
hacks GRPO runs found against earlier builds (relay/rewards/hacks.py) join them; the exact-answer
rule labels each answer right or wrong; a sequence classifier with one label, started from the
tiny policy's own weights (a fresh score head), learns to score the right answer to a prompt
above a wrong one (Bradley-Terry loss on pairs of answers to one prompt).
The tiny policy's mistakes are mostly a dropped ones carry (17+25 -> 32), so the reward model
has to learn carrying. It reads each answer exactly as a RewardModel actor does: the
conversation rendered with its own chat template.

A logistic loss on right/wrong labels instead stalled at the base rate here (loss 0.67 after 500
steps): "is this a carry problem" explains most of the labels, and the answer's tens digit was
never looked at. Pairs from one prompt leave only the answer to tell them apart.

Writes relay/models/shipped/tiny-rm and its manifest entry, with the share of (right, wrong)
answer pairs to held-out prompts it orders right, by kind of wrong answer. One thread and fixed
seeds: the same machine rebuilds the same bits (450-700 s on a loaded 2-core machine).
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
from relay.rewards.hacks import read_hacks
from relay.rewards.reward_model import conversation
from relay.types import Sample

RECIPE = {
    "seed": 0,
    "train_prompts": 2000,  # x answers_per_prompt sampled answers, deduplicated per prompt
    "answers_per_prompt": 4,
    "eval_prompts": 512,
    "steps": 800,
    "pairs_per_step": 32,
    "lr": 1e-3,
    "lm_weight": 1.0,  # next-token loss on right answers, beside the pairs' loss
    "carry_weight": 3,  # (right, right +-10) pairs seen this many times as often as the others
    "digits": 2,
    "max_new_tokens": 6,
}
# Wrong answers next to the right one, added to the policy's own answers. Each closed a
# door GRPO walked through: trained on the policy's answers alone (all of them a ones carry short),
# the reward model learned "larger is better" and the policy answered 26+89 with 116 (held-out
# 0.53 -> 0.07); with a carry too few/many added it could not tell a ones digit off by one, and the
# policy answered 33+57 with 91 (0.53 -> 0.11). So: every digit off by one (+-1, +-10, +-100), the
# carry errors (+-9, +-11: a carry moved between digits) and a carry too few/many.
NEIGHBOURS = (-100, -11, -10, -9, -1, 1, 9, 10, 11, 100)
TRAIN_SEED = 3_000_017  # prompts neither the tiny model's warm start nor any held-out set uses


def malformed(answer: str) -> list[str]:
    """Format violations of a right answer: all wrong by the exact rule, some a GRPO policy could
    drift to in its 6 tokens (repeated digits, too long, extra text, no number at all)."""
    return [
        "",
        answer + answer,  # repeated
        answer[0] * 6,  # too long
        answer[:-1] or "x",  # cut short
        answer + "+",  # extra text
    ]


@torch.no_grad()
def sample_answers(policy, tokenizer, rows: list[dict], n: int, seed: int) -> list[tuple[dict, str, str]]:
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
        out += [(chunk[i // n], text, "policy") for i, text in enumerate(texts)]
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


def hard_negatives(rows: list[dict]) -> list[tuple[dict, str, str]]:
    """Each row's right answer, the wrong ones next to it (NEIGHBOURS) and its format violations,
    as (row, answer, kind)."""
    out = []
    for row in rows:
        right = int(row["ground_truth"])
        out.append((row, str(right), "right"))
        out += [(row, str(right + d), f"{d:+d}") for d in NEIGHBOURS if right + d >= 0]
        out += [(row, text, "format") for text in malformed(str(right))]
    return out


def labelled(items: list[tuple[dict, str, str]]) -> tuple[list[Sample], list[float], list[str]]:
    """Distinct (prompt, answer) samples, their rule labels and kinds (the first kind seen)."""
    seen, samples, labels, kinds = set(), [], [], []
    for row, answer, kind in items:
        if (row["prompt"], answer) in seen:
            continue
        seen.add((row["prompt"], answer))
        s = as_sample(row, answer)
        samples.append(s)
        labels.append(arithmetic_reward(s))
        kinds.append(kind)
    return samples, labels, kinds


def logits(model, rows: list[list[int]], pad_id: int) -> torch.Tensor:
    width = max(map(len, rows))
    ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return model(input_ids=ids, attention_mask=mask).logits[:, 0]


def carry_weighted(pairs: list[tuple[int, int]], samples: list[Sample], times: int) -> list[tuple[int, int]]:
    """`pairs`, those whose wrong answer is a carry too few or too many (the right one +-10) `times`
    over: whether a problem carries is the one thing GRPO moves the tiny policy on, both ways
    (the format violations and the hundreds are learnt within a hundred steps anyway)."""

    def off_by_ten(i: int) -> bool:
        text = samples[i].response_text
        return text.isdigit() and abs(int(text) - int(samples[i].ground_truth)) == 10

    return [p for p in pairs for _ in range(times if off_by_ten(p[1]) else 1)]


def pairs_of(samples: list[Sample], labels: list[float]) -> list[tuple[int, int]]:
    """(right, wrong) index pairs of answers to the same prompt."""
    by_prompt: dict[str, tuple[list[int], list[int]]] = {}
    for i, (s, label) in enumerate(zip(samples, labels)):
        right, wrong = by_prompt.setdefault(s.meta["messages"][-1]["content"], ([], []))
        (right if label > 0.5 else wrong).append(i)
    return [(r, w) for right, wrong in by_prompt.values() for r in right for w in wrong]


@torch.no_grad()
def scores_of(model, rows: list[list[int]], pad_id: int) -> torch.Tensor:
    model.eval()
    return torch.cat([logits(model, rows[i : i + 256], pad_id) for i in range(0, len(rows), 256)])


def pair_accuracy(scores: torch.Tensor, pairs: list[tuple[int, int]]) -> float:
    """Share of (right, wrong) answer pairs to one prompt that the reward model orders right."""
    right, wrong = torch.tensor([p[0] for p in pairs]), torch.tensor([p[1] for p in pairs])
    return (scores[right] > scores[wrong]).float().mean().item()


def lm_loss(model, ids: torch.Tensor, hidden: torch.Tensor, ends: list[int], answer_lens: list[int]) -> torch.Tensor:
    """Next-token loss on each right answer's digits and its end of turn, through the tied
    embeddings: the backbone learns to add (carries kept), which the score head then reads."""
    logits = hidden[:, :-1] @ model.model.embed_tokens.weight.T  # [B, T-1, V]
    labels = torch.full(ids[:, 1:].shape, -100)
    for b, (end, n) in enumerate(zip(ends, answer_lens)):  # the row ends <|im_end|> \n
        labels[b, end - 3 - n : end - 2] = ids[b, end - 2 - n : end - 1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def train(
    model, rows: list[list[int]], pairs: list[tuple[int, int]], answer_lens: list[int], pad_id: int, log=None
) -> None:
    """Bradley-Terry: -log sigmoid(score(right) - score(wrong)) over (right, wrong) pairs of one prompt,
    plus lm_weight x the next-token loss on the right answers. Only the order within a prompt is
    taught, which is all a GRPO group baseline reads. The score is the last token's, as
    AutoModelForSequenceClassification pools it (rows are right-padded)."""
    r = RECIPE
    optimizer = torch.optim.AdamW(model.parameters(), lr=r["lr"], weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=r["lr"], total_steps=r["steps"], pct_start=0.05)
    rng = random.Random(r["seed"])
    order: list[tuple[int, int]] = []
    for step in range(r["steps"]):
        model.train()
        if len(order) < r["pairs_per_step"]:
            order += rng.sample(pairs, len(pairs))
        chunk, order = order[: r["pairs_per_step"]], order[r["pairs_per_step"] :]
        batch = [rows[i] for pair in chunk for i in pair]
        width = max(map(len, batch))
        ids = torch.tensor([b + [pad_id] * (width - len(b)) for b in batch])
        mask = torch.tensor([[1] * len(b) + [0] * (width - len(b)) for b in batch])
        hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state  # [2P, T, H]
        ends = [len(b) for b in batch]
        out = model.score(hidden[torch.arange(len(batch)), torch.tensor(ends) - 1])[:, 0].view(-1, 2)
        loss = -torch.nn.functional.logsigmoid(out[:, 0] - out[:, 1]).mean()
        if r["lm_weight"]:
            lens = [answer_lens[right] for right, _ in chunk]
            loss = loss + r["lm_weight"] * lm_loss(model, ids[0::2], hidden[0::2], ends[0::2], lens)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if log is not None and (step + 1) % 100 == 0:
            log(step + 1, loss.item())


def kind_accuracy(scores: torch.Tensor, pairs: list[tuple[int, int]], kinds: list[str]) -> dict[str, float]:
    """pair_accuracy of the (right, wrong) pairs whose wrong answer is of each kind."""
    by_kind: dict[str, list[tuple[int, int]]] = {}
    for pair in pairs:
        by_kind.setdefault(kinds[pair[1]], []).append(pair)
    return {k: round(pair_accuracy(scores, by_kind[k]), 4) for k in sorted(by_kind)}


def build(out: Path) -> dict:
    start = time.perf_counter()
    r = RECIPE
    base = shipped_model(BASE)
    tokenizer = load_tokenizer(str(base))
    policy = AutoModelForCausalLM.from_pretrained(base).eval()
    pad = tokenizer.pad_token_id
    train_rows, eval_rows = (
        make_rows(r["train_prompts"], TRAIN_SEED, r["digits"]),
        make_rows(r["eval_prompts"], HELD_OUT_SEED, r["digits"]),
    )
    train_answers = sample_answers(policy, tokenizer, train_rows, r["answers_per_prompt"], r["seed"])
    eval_answers = sample_answers(policy, tokenizer, eval_rows, 8, 1)
    # the wrong answers GRPO runs found against earlier builds (relay/rewards/hacks.py); read once:
    # the count recorded is the count trained on
    collected = read_hacks(r["digits"])
    train_samples, train_labels, _ = labelled(train_answers + hard_negatives(train_rows) + collected)
    # held out: the policy's own answers (what RL shows the RM first), then every hard negative
    own_samples, own_labels, _ = labelled(eval_answers)
    hard_samples, hard_labels, hard_kinds = labelled(hard_negatives(eval_rows) + eval_answers)
    train_ids, own_ids, hard_ids = (encode(tokenizer, x) for x in (train_samples, own_samples, hard_samples))
    pairs = carry_weighted(pairs_of(train_samples, train_labels), train_samples, r["carry_weight"])
    own_pairs, hard_pairs = pairs_of(own_samples, own_labels), pairs_of(hard_samples, hard_labels)
    print(f"build_rm: {len(train_ids)} distinct answers, {len(pairs)} (right, wrong) pairs", flush=True)

    torch.manual_seed(r["seed"])
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1)  # a fresh score head
    model.config.pad_token_id = pad

    def log(step: int, loss: float) -> None:
        own = pair_accuracy(scores_of(model, own_ids, pad), own_pairs)
        hard = pair_accuracy(scores_of(model, hard_ids, pad), hard_pairs)
        print(
            f"build_rm: step {step}/{r['steps']} loss {loss:.4f} held-out pair accuracy {own:.3f} (hard {hard:.3f})",
            flush=True,
        )

    answer_lens = [len(tokenizer(s.response_text, add_special_tokens=False).input_ids) for s in train_samples]
    train(model, train_ids, pairs, answer_lens, pad, log)
    model.eval()
    own_scores, hard_scores = scores_of(model, own_ids, pad), scores_of(model, hard_ids, pad)
    held_out = {
        "pair_accuracy": pair_accuracy(own_scores, own_pairs),
        "pairs": len(own_pairs),
        "answers": len(own_ids),
        "pair_accuracy_hard": pair_accuracy(hard_scores, hard_pairs),
        "pairs_hard": len(hard_pairs),
        "pair_accuracy_by_kind": kind_accuracy(hard_scores, hard_pairs, hard_kinds),
    }
    files = save_folder(model, tokenizer, out / RM_NAME)
    recipe = {"builder": "relay.rewards.build_rm", "base": BASE, **r, "neighbours": list(NEIGHBOURS)}
    recipe["hacks"] = len(collected)
    record(out, RM_NAME, {"recipe": recipe, "files": files, "held_out": held_out})
    print(
        f"build_rm: {out / RM_NAME} in {time.perf_counter() - start:.0f} s; held-out: orders "
        f"{held_out['pair_accuracy']:.3f} of {held_out['pairs']} (right, wrong) pairs of policy answers right, "
        f"{held_out['pair_accuracy_hard']:.3f} of {held_out['pairs_hard']} with the hard negatives; "
        f"by kind of wrong answer: {held_out['pair_accuracy_by_kind']}",
        flush=True,
    )
    return held_out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=SHIPPED_DIR, help=f"folder to write (default: {SHIPPED_DIR})")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # one reduction order: rebuilds on one machine are bit-identical
    build(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
