"""task.name=bfcl: the Berkeley Function Calling Leaderboard's single-turn rows, scored by BFCL's
own AST checker (`pip install --no-deps bfcl-eval==2026.3.23`; settings in relay/config/bfcl.py).

    system:    how to call, in the run's tool-call format (tools.parser), and the row's functions
    user:      Find the area of a triangle with a base of 10 units and height of 5 units.
    assistant: <tool_call>
               {"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}
               </tool_call>                                 (reward 1: the checker accepts it)

Rows. Each category's rows are the package's `data/BFCL_v4_<category>.json`, their possible
answers `data/possible_answer/BFCL_v4_<category>.json`. The split is fixed by row id, whatever the
run's seed or sizes: ordered by the SHA-256 of its id, the first third of a category is held out
(HELD_OUT_FRACTION), and training rows come only from the other two thirds, so the rows a
held-out score counts are never trained on in any run. Held-out rows are the first ones of that
order (task.num_eval_rows, split by weight); training rows cycle through the rest in an order
shuffled by run.seed (task.num_train_rows, split by weight). A training row whose messages equal
a held-out row's is dropped.

Prompt. The system message is INSTRUCTION (or task.system_prompt) with the call syntax of
tools.parser, then the row's function docs as BFCL gives them, one JSON object per line between
<tools> tags. A row's own system message (the live categories have some) follows ours in the same
message; its other messages follow as they are.

Reward. The model's calls are parsed from its reply by tools.parser and never run. AST
categories: 1.0 when BFCL's `ast_checker` accepts them against the row's possible answers (the
function name, every required argument, each value among the allowed ones; any order in the
parallel categories), else 0.0. Irrelevance categories: 1.0 when the reply holds no call, as
BFCL scores them. Metrics split by category in a mix: `reward/<category>`,
`eval/<category>/accuracy` (relay.envs.reasoning_gym.by_dataset reads ground_truth["dataset"]).

Demonstrations (sft.data: task): training rows answered with their possible answers' first
allowed values, in the run's call format, each one checked by the same checker (single-turn rows
only).

Multi-turn categories (multi_turn_base, ...) run as episodes in relay's environment pool against
the package's simulated APIs: relay/envs/bfcl_multi_turn.py.

The checker's module imports `bfcl_eval.constants.model_config`, which imports every vendor's
SDK the package's runners use. The checker reads it only to learn whether a model's API renamed
"." to "_" in function names; relay's calls keep the names as written, so a stand-in module
answering "no renaming" is in sys.modules during that one import (`_checker`), and nothing else
of the package is replaced or copied.
"""

from __future__ import annotations

import hashlib
import json
import sys
import types
from functools import lru_cache
from importlib import resources
from typing import Any

from relay.config.bfcl import AST_CATEGORIES

HELD_OUT_FRACTION = 3  # 1/3 of each category: 67 rows of a 200-row category, 64 and a few to spare
INSTRUCTION = (
    "You are given a question and a set of possible functions. Based on the question, make one or "
    "more function calls to achieve the purpose. If none of the functions can be used, say so and "
    "call none. Reply with the function calls only, in this format:\n{syntax}"
)
CALL_SYNTAX = {
    "hermes": '<tool_call>\n{"name": "func_name1", "arguments": {"param1": "value1"}}\n</tool_call>\n'
    "with one <tool_call> block per call.",
    "json": '{"name": "func_name1", "arguments": {"param1": "value1"}}\nwith one JSON object per call.',
    "function_call": '[func_name1(param1="value1", param2=2), func_name2(param="value")]',
}
CALL_SYNTAX["pythonic"] = CALL_SYNTAX["function_call"]
MODEL_NAME = "relay"  # what the checker's model-specific renaming looks up (see _checker)


def read_category(category: str) -> list[dict[str, Any]]:
    """BFCL's rows of one category, each with its possible answer under "answer" (AST categories)."""
    data = resources.files("bfcl_eval") / "data"
    rows = [json.loads(line) for line in (data / f"BFCL_v4_{category}.json").read_text().splitlines() if line]
    if category in AST_CATEGORIES:
        answers = (data / "possible_answer" / f"BFCL_v4_{category}.json").read_text().splitlines()
        by_id = {a["id"]: a["ground_truth"] for a in map(json.loads, filter(None, answers))}
        rows = [{**row, "answer": by_id[row["id"]]} for row in rows]
    return rows


def split(rows: list[dict[str, Any]], key=lambda row: row["id"]) -> tuple[list[dict], list[dict]]:
    """(training pool, held-out pool) of one category: fixed by row id (multi-turn rows: by their
    scenario, relay/envs/bfcl_multi_turn.py), the same in every run."""
    ordered = sorted(rows, key=lambda row: hashlib.sha256(key(row).encode()).hexdigest())
    n_held_out = -(-len(ordered) // HELD_OUT_FRACTION)
    return ordered[n_held_out:], ordered[:n_held_out]


def as_row(category: str, row: dict[str, Any], instruction: str, parser: str) -> dict[str, Any]:
    docs = "\n".join(json.dumps(f) for f in row["function"])
    system = f"{instruction}\n\nThe functions you can call:\n<tools>\n{docs}\n</tools>"
    messages = [dict(m) for m in row["question"][0]]
    if messages and messages[0]["role"] == "system":
        system += "\n\n" + messages.pop(0)["content"]
    truth = {"dataset": category, "id": row["id"], "parser": parser, "functions": row["function"]}
    return {
        "messages": [{"role": "system", "content": system}, *messages],
        "ground_truth": {**truth, "answer": row.get("answer")},
    }


class _NoRenaming(dict):
    """The stand-in for BFCL's MODEL_CONFIG_MAPPING: every model keeps "." in function names."""

    def __missing__(self, model_name: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(underscore_to_dot=False)


@lru_cache(maxsize=1)
def _checker():
    """BFCL's ast_checker and its Language enum, imported without the vendors' SDKs (module doc)."""
    name = "bfcl_eval.constants.model_config"
    stand_in = None
    if name not in sys.modules:
        stand_in = sys.modules[name] = types.ModuleType(name)
        stand_in.MODEL_CONFIG_MAPPING = _NoRenaming()
    try:
        from bfcl_eval.constants.enums import Language
        from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    finally:
        if stand_in is not None and sys.modules.get(name) is stand_in:
            del sys.modules[name]  # a later import of the real module still gets the real one
    return ast_checker, Language


def calls_in(text: str, parser: str) -> list[dict[str, dict]]:
    """The reply's calls as BFCL's checker takes them: [{name: {argument: value}}, ...]."""
    from relay.tools.parsers import get_parser

    return [{c.name: c.arguments} for c in get_parser(parser).parse(text).calls]


def check(truth: dict[str, Any], text: str) -> dict[str, Any]:
    """BFCL's verdict on a reply: {"valid": bool, "error": [...], ...}."""
    calls = calls_in(text, truth["parser"])
    if truth["answer"] is None:  # irrelevance: right when no call is made
        return {"valid": not calls, "error": [] if not calls else ["a call was made"]}
    ast_checker, language = _checker()
    return ast_checker(truth["functions"], calls, truth["answer"], language.PYTHON, truth["dataset"], MODEL_NAME)


def bfcl_reward(sample, env=None) -> float:
    """1.0 when BFCL's checker accepts the final turn's calls, else 0.0."""
    return 1.0 if check(sample.ground_truth, sample.final_text)["valid"] else 0.0


_ABSENT = object()


def _first(options: list) -> Any:
    """A possible answer's first allowed value; "" allows leaving an optional argument out."""
    return next((o for o in options if o != ""), _ABSENT)


def _value(option: Any) -> Any:
    """One allowed value written out: a dict's values are lists of allowed values again."""
    if isinstance(option, dict):
        picked = {k: _first(v) if isinstance(v, list) else v for k, v in option.items()}
        return {k: _value(v) for k, v in picked.items() if v is not _ABSENT}
    if isinstance(option, list):
        return [_value(v) for v in option]
    return option


def reply(calls: list[tuple[str, dict]], parser: str) -> str:
    """The calls as a reply in a parser's format: the text the system prompt asks for."""
    if parser in ("function_call", "pythonic"):
        args = lambda a: ", ".join(f"{k}={v!r}" for k, v in a.items())  # noqa: E731  Python literals
        return "[" + ", ".join(f"{name}({args(a)})" for name, a in calls) + "]"
    objects = [json.dumps({"name": name, "arguments": a}) for name, a in calls]
    if parser == "hermes":
        return "\n".join(f"<tool_call>\n{o}\n</tool_call>" for o in objects)
    return "\n".join(objects)


def demonstrations(rows: list[dict]) -> list[dict]:
    """For the supervised stage (sft.data: task): each training row answered with the first allowed
    value of every argument of its possible answer, in the run's call format, kept only when BFCL's
    checker accepts it; irrelevance rows answered with a refusal. A small instruct model writes no
    call BFCL can read (docs/tasks.md), so reward needs this start."""
    out = []
    for row in rows:
        truth = row["ground_truth"]
        if "messages" not in row:  # a multi-turn row: an episode, no one-turn answer to write
            continue
        if truth["answer"] is None:
            text = "None of the functions can be used for this question."
        else:
            calls = [(name, _value(args)) for answer in truth["answer"] for name, args in answer.items()]
            text = reply(calls, truth["parser"])
        if check(truth, text)["valid"]:
            out.append({"messages": [*row["messages"], {"role": "assistant", "content": text}]})
    return out
