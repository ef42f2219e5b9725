"""Built-in task: multiplication with a Python tool (configs/math_tool.yaml).

    user:      What is 7*48? You may run Python in <tool>...</tool>.
    assistant: <tool>print(7*48)</tool>                  (generation stops at </tool>)
               <result>\\n336\\n</result>                 (the sandbox's output; loss mask 0)
               336<|im_end|>                              (the final answer: reward 1 if exact)

Held-out questions are 128 products set aside for every seed: no training row and no warm-start
episode asks one. A ~1M-parameter model cannot multiply in its head, but it can copy the operands
into code and the result back out. The tiny model's warm start (relay/models/warm_start.py) sees
a mix of such tool episodes and direct guesses, so RL starts from a model that knows the format,
often guesses instead of calling the tool, and sometimes miscopies; reward rises as it learns to
call the tool and copy exactly.
"""

from __future__ import annotations

import random
from typing import Any

from relay.envs.arithmetic import parse_answer
from relay.envs.chat import ScriptedEpisode, ScriptedTurn

PROMPT = "What is {a}*{b}? You may run Python in <tool>...</tool>."


HELD_OUT_SEED = 0  # the held-out split is the same for every run seed: the shipped warm start never sees it
NUM_HELD_OUT = 128


def problem_space(digits: tuple[int, int] = (1, 2)) -> list[tuple[int, int]]:
    """Every product of a `digits[0]`-digit and a `digits[1]`-digit number (one-digit factors from 2)."""
    (lo_a, hi_a), (lo_b, hi_b) = ((max(2, 10 ** (d - 1)), 10**d - 1) for d in digits)
    return [(a, b) for a in range(lo_a, hi_a + 1) for b in range(lo_b, hi_b + 1)]


def split_problems(digits: tuple[int, int] = (1, 2)) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(training problems, held-out problems): NUM_HELD_OUT products set aside once, for every seed."""
    space = problem_space(digits)
    random.Random(HELD_OUT_SEED).shuffle(space)
    return space[NUM_HELD_OUT:], space[:NUM_HELD_OUT]


def as_row(a: int, b: int) -> dict[str, Any]:
    return {"prompt": PROMPT.format(a=a, b=b), "ground_truth": str(a * b)}


def make_rows(n: int, seed: int, digits: tuple[int, int] = (1, 2)) -> list[dict[str, Any]]:
    """n training rows, drawn with replacement from the problems that are not held out."""
    train, _ = split_problems(digits)
    rng = random.Random(seed)
    return [as_row(*rng.choice(train)) for _ in range(n)]


def make_eval_rows(n: int, seed: int, digits: tuple[int, int] = (1, 2)) -> list[dict[str, Any]]:
    """The first n held-out problems (at most NUM_HELD_OUT), the same for every seed."""
    _, held_out = split_problems(digits)
    if n > len(held_out):
        raise ValueError(f"task.num_eval_rows: math_tool holds out {len(held_out)} problems, got {n}")
    return [as_row(*p) for p in held_out[:n]]


def math_tool_reward(sample, env=None) -> float:
    """1 for the exact product as the final turn's whole text (no environment needed)."""
    answer = parse_answer(sample.final_text)
    return 1.0 if answer is not None and answer == str(sample.ground_truth) else 0.0


OUTCOMES = ("copied", "guessed", "miscopied", "wrong_code", "wrong_guess", "unfinished")


def episode_outcome(sample) -> str:
    """What an episode did, for reading a run (benchmarks/math_tool_dip.py); the first two are right:
    copied       the tool printed the product and the final answer is it;
    guessed      a direct answer (no tool call) that is the product;
    miscopied    the tool printed the product and the final answer differs from it;
    wrong_code   the tool ran, but never printed the product (wrong operands, an error);
    wrong_guess  a direct answer that is wrong;
    unfinished   no final answer (turn, token or tool-turn limits)."""
    truth = str(sample.ground_truth)
    if not (sample.meta.get("env") or {}).get("actions"):
        return "unfinished"
    right = parse_answer(sample.final_text) == truth
    if not sample.tool_calls:
        return "guessed" if right else "wrong_guess"
    if f"<result>\n{truth}\n</result>" not in sample.response_text:
        return "wrong_code"  # a right answer here came from the model, not the tool: still counted as wrong code
    return "copied" if right else "miscopied"


class MathToolEnv:
    """One question; the first turn without a tool call is the answer (reward 1 if exact, done)."""

    warm_start_steps = 500  # relay/models/warm_start.py
    # Share of warm-start episodes that call the tool; the rest guess. At one half the greedy warm start
    # guesses on about a quarter of held-out products, so RL has a choice to teach (call, don't guess)
    # besides copying, which it barely moves.
    tool_fraction = 0.5

    def reset(self, prompt: str, ground_truth: str, **_: Any) -> str:
        self.question, self.truth, self.answer = prompt, str(ground_truth), None
        return prompt

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        self.answer = parse_answer(action)
        correct = self.answer is not None and self.answer == self.truth
        return ("Correct." if correct else "Wrong."), float(correct), True, {"correct": correct}

    def get_state_description(self) -> str:
        return f"{self.question} Answer: {self.answer if self.answer is not None else '(none)'}"

    def get_prompt_prefix(self) -> str:
        return ""

    @staticmethod
    def make_rows(n: int, seed: int) -> list[dict[str, Any]]:
        return make_rows(n, seed)

    @staticmethod
    def make_eval_rows(n: int, seed: int) -> list[dict[str, Any]]:
        return make_eval_rows(n, seed)

    @classmethod
    def warm_start_episodes(cls, n: int, seed: int) -> list[ScriptedEpisode]:
        rng = random.Random(seed)
        out = []
        for row in make_rows(n, seed):
            prompt = [{"role": "user", "content": row["prompt"]}]
            expr = row["prompt"].split("What is ")[1].split("?")[0]
            if rng.random() < cls.tool_fraction:
                turns = [
                    ScriptedTurn(
                        f"<tool>print({expr})</tool>",
                        eos=False,
                        observation=f"\n<result>\n{row['ground_truth']}\n</result>\n",
                    ),
                    ScriptedTurn(row["ground_truth"]),
                ]
            else:  # a direct answer: the format of one, the value mostly out of reach
                turns = [ScriptedTurn(row["ground_truth"])]
            out.append(ScriptedEpisode(prompt, turns))
        return out
