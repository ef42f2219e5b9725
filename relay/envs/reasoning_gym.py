"""task.name=reasoning_gym: rows from reasoning-gym's procedural generators, scored by the
package's own verifier (`pip install 'relay[tasks]'`; settings in relay/config/reasoning_gym.py).

Rows. A dataset's rows come from `reasoning_gym.create_dataset(name, size=n, seed=s, **args)`;
its generators draw row i from `Random(s + i)`, so n rows use the seed range [s, s + n). With
N = task.num_train_rows + task.num_eval_rows and base = run.seed * N, training rows use
[base, base + n_train) and held-out rows the next range, [base + n_train, base + N), which
training never uses. A small question space can still repeat a question under another seed, so
a training row asking a held-out question is dropped: held-out accuracy measures questions never
trained on. A mix splits both counts by weight (largest remainders).

Prompt. Each row is chat messages, rendered with the model's chat template: a system message
(task.system_prompt, else INSTRUCTION) and the dataset's question as the user's message. With
task.few_shot=K, K worked examples come between the two: the first K training rows of the same
dataset, each as the user's question and the assistant's reply `<answer>ANSWER</answer>`. They are
the same for every row of a dataset, training and held-out alike, and are training rows, never
held-out ones. A small model follows the answer format from them far more often than from the
instruction alone.

Answer and reward. The answer is the text of the last `<answer>...</answer>` block of the
model's final turn, stripped; with no such block, the final non-empty line. The reward is the
dataset's own `score_answer(answer, entry)`: 1.0 when right, some datasets give partial credit
(held-out accuracy counts rewards >= task.success_threshold, 1.0 by default); with
task.partial_credit=false only a right answer earns anything (1.0, else 0.0). A verifier that
raises on a reply it cannot read (prime_factorization's int() of free text; boxnet, coin_flip and
game_of_life on some malformed replies) makes it a wrong answer, not a reward error: reward 0.0,
trained on, the exception in sample.meta["unparsed_answer"], counted per step (reward/unparsed)
and in held-out episodes (eval/unparsed). A bad dataset name or argument still fails at start-up.

Metrics. In a mix, each step's mean reward per dataset is `reward/<dataset>`, and held-out
accuracy per dataset `eval/<dataset>/accuracy`, beside the overall ones; reward/unparsed and
eval/unparsed count the replies the verifier could not read. Beside each held-out accuracy, the
summary gives what always answering the training rows' most common answer would score (majority,
<dataset>/majority): a Yes/No or True/False dataset's accuracy can rise to it by one word.

Nothing is downloaded: every generator runs from the installed package.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from relay.config import ConfigError
from relay.config.reasoning_gym import mix
from relay.envs.tool_tasks import question

INSTRUCTION = (
    "Answer the question. Put only the final answer between <answer> and </answer> tags, "
    "for example <answer>42</answer>."
)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
UNPARSED = "unparsed_answer"  # sample.meta key: why the dataset's verifier could not read the reply


def shares(total: int, weights: dict[str, float]) -> dict[str, int]:
    """`total` split by weight: floors, then the largest remainders get one more each."""
    whole = sum(weights.values())
    exact = {name: total * w / whole for name, w in weights.items()}
    out = {name: int(x) for name, x in exact.items()}
    for name in sorted(exact, key=lambda n: out[n] - exact[n])[: total - sum(out.values())]:
        out[name] += 1
    return out


def make_rows(task, seed: int) -> tuple[list[dict], list[dict]]:
    """(training rows, held-out rows) of the task's dataset or mix; no held-out question is a training one."""
    datasets = mix(task)
    weights = {name: w for name, (w, _) in datasets.items()}
    n_train, n_eval = shares(task.num_train_rows, weights), shares(task.num_eval_rows, weights)
    base = seed * (task.num_train_rows + task.num_eval_rows)
    system = task.system_prompt or INSTRUCTION
    train, held_out = [], []
    for name, (_, args) in datasets.items():
        eval_rows = generate(name, args, n_eval[name], base + n_train[name], system)
        asked = {question(r) for r in eval_rows}
        train_rows = [r for r in generate(name, args, n_train[name], base, system) if question(r) not in asked]
        key = "task.dataset" if task.dataset is not None else f"task.datasets.{name}"
        if n_train[name] and not train_rows:
            raise ConfigError([f"{key}: every training question of {name} is also a held-out one"])
        if len(train_rows) < task.few_shot:
            raise ConfigError(
                [f"task.few_shot: {task.few_shot} worked examples, but {key} has {len(train_rows)} training rows"]
            )
        examples = worked_examples(train_rows[: task.few_shot])
        train += [with_examples(r, examples) for r in train_rows]
        held_out += [with_examples(r, examples) for r in eval_rows]
    return train, held_out


def worked_examples(rows: list[dict]) -> list[dict]:
    """Each row's question and its reference answer in the answer tags, as a user and an assistant turn."""
    turns = []
    for row in rows:
        answer = row["ground_truth"]["entry"]["answer"]
        turns += [row["messages"][-1], {"role": "assistant", "content": f"<answer>{answer}</answer>"}]
    return turns


def with_examples(row: dict, examples: list[dict]) -> dict:
    """The row with the worked examples between its system message and its question."""
    system, *asked = row["messages"]
    return {**row, "messages": [system, *examples, *asked]}


def generate(name: str, args: dict[str, Any], size: int, first_seed: int, system: str) -> list[dict]:
    """`size` rows of one dataset, from the seed range [first_seed, first_seed + size)."""
    import reasoning_gym

    if size == 0:  # the package refuses size 0
        return []
    made = reasoning_gym.create_dataset(name, size=size, seed=first_seed, **args)
    return [as_row(name, args, entry, system) for entry in made]


def as_row(name: str, args: dict[str, Any], entry: dict[str, Any], system: str) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": entry["question"]}]
    return {"messages": messages, "ground_truth": {"dataset": name, "args": args, "entry": entry}}


def extract_answer(text: str) -> str:
    """The last <answer>...</answer> block's text, stripped; else the final non-empty line."""
    if blocks := _ANSWER.findall(text):
        return blocks[-1].strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


@lru_cache(maxsize=64)
def _scorer(name: str, args_json: str):
    import reasoning_gym

    return reasoning_gym.create_dataset(name, size=1, seed=0, **json.loads(args_json)).score_answer


def reasoning_gym_reward(sample, env=None) -> float:
    """The dataset's own score_answer of the extracted answer (the generator's arguments as the row's)."""
    truth = sample.ground_truth
    score = _scorer(truth["dataset"], json.dumps(truth["args"], sort_keys=True))  # bad name or args raise here
    try:
        value = score(extract_answer(sample.final_text), truth["entry"])
    except Exception as e:  # the verifier met a reply it cannot read: a wrong answer, trained on as one
        sample.meta[UNPARSED] = f"{type(e).__name__}: {str(e)[:200]}"
        return 0.0
    return float(value)


def reasoning_gym_reward_exact(sample, env=None) -> float:
    """task.partial_credit=false: 1.0 for a reply the verifier scores right, 0.0 for any other."""
    return float(reasoning_gym_reward(sample, env) >= 1.0)


def dataset_of(sample) -> str | None:
    truth = sample.ground_truth
    return truth.get("dataset") if isinstance(truth, dict) else None


def by_dataset(samples, key: str, value: Callable[[list[float]], float]) -> dict[str, float]:
    """{key.format(dataset): value(its samples' rewards)} when the samples come from a mix of
    datasets (two or more); else nothing."""
    rewards: dict[str, list[float]] = {}
    for s in samples:
        if (name := dataset_of(s)) is not None:
            rewards.setdefault(name, []).append(s.reward)
    return {key.format(name): value(r) for name, r in sorted(rewards.items())} if len(rewards) > 1 else {}


def is_gym_truth(truth) -> bool:
    """Whether a ground truth is a reasoning-gym row's (it holds the generator's entry); BFCL's rows
    also carry a "dataset", but no entry."""
    return isinstance(truth, dict) and "entry" in truth


def unparsed_metrics(samples, key: str) -> dict[str, float]:
    """{key: how many replies the verifier could not read} when the samples are reasoning-gym rows
    (their ground truth holds the generator's entry); else nothing."""
    rows = [s for s in samples if is_gym_truth(s.ground_truth)]
    return {key: float(sum(UNPARSED in s.meta for s in rows))} if rows else {}


def majority_metrics(train: list[dict], held_out: list[dict]) -> dict[str, float]:
    """A constant-answer baseline from the rows alone: eval/majority, the share of held-out rows whose
    answer is the most common answer among their dataset's training rows (what always giving that
    answer would score, counted over all held-out rows as eval/accuracy is), and in a mix
    eval/<dataset>/majority beside each eval/<dataset>/accuracy; {} for rows that are not
    reasoning-gym rows."""
    trained, asked = _answers(train), _answers(held_out)
    hits = {}
    for name, answers in asked.items():
        top = Counter(trained.get(name, ())).most_common(1)  # no training rows: no answer to repeat
        hits[name] = sum(bool(top) and a == top[0][0] for a in answers)
    if not hits:
        return {}
    out = {"eval/majority": sum(hits.values()) / sum(len(a) for a in asked.values())}
    if len(asked) > 1:  # per dataset only in a mix, as eval/<dataset>/accuracy
        out |= {f"eval/{name}/majority": hits[name] / len(asked[name]) for name in sorted(asked)}
    return out


def _answers(rows: list[dict]) -> dict[str, list[str]]:
    """{dataset: its rows' reference answers} of the reasoning-gym rows among `rows`."""
    out: dict[str, list[str]] = {}
    for row in rows:
        if is_gym_truth(truth := row.get("ground_truth")):
            out.setdefault(truth["dataset"], []).append(str(truth["entry"]["answer"]))
    return out
