"""The broken parts of benchmarks/health_failures.py's runs, named on the driver's command line by
dotted path: a reward whose checker pays for a slip, and a calculator tool that stops answering.

    task.reward_fn=benchmarks.health_failure_parts:carry_slip_reward
    'tools.functions=[benchmarks.health_failure_parts:python]'
"""

from __future__ import annotations

import ast
import itertools
import operator
import os

from relay.envs.arithmetic import parse_answer


def slip_sum(prompt: str) -> int:
    """a+b as a checker with a carry bug adds it: the carry out of the ones column is dropped
    (17+25 -> 32). The tiny model's warm start makes this very slip on about 70% of its samples
    of carry problems (relay/models/tiny.py), so sampling finds the loophole from the first step."""
    a, b = (int(x) for x in prompt.split("+"))
    total = a + b
    return total - 10 if a % 10 + b % 10 >= 10 else total


def carry_slip_reward(trajectory) -> float:
    """Training rows come without an answer (ground_truth null) and are graded by a checker that
    works the sum out itself, with the carry bug; held-out rows carry their answer and are graded
    by the exact check alone, as a benchmark would be. The reward then rises while held-out
    accuracy falls."""
    answer = parse_answer(trajectory.final_text)
    if trajectory.ground_truth is not None:
        return 1.0 if answer == str(trajectory.ground_truth) else 0.0
    prompt = trajectory.meta["messages"][-1]["content"]
    return 1.0 if answer is not None and int(answer) == slip_sum(prompt) else 0.0


# the calls the tool answers before it fails; read in the tool executor's process, which inherits
# the driver's environment
WORKING_CALLS = int(os.environ.get("RELAY_FLAKY_TOOL_CALLS", "1500"))
_calls = itertools.count(1)  # next() is atomic: the executor runs calls in threads
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _value(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.left), _value(node.right))
    raise ValueError("only integer +, - and * are supported")


def python(code: str) -> str:
    """Run a print of an integer expression, as the math_tool task's calls are written.

    Args:
        code: Python code such as print(37*48).
    """
    # a remote service that goes down: every call after the first WORKING_CALLS fails, as the tool
    # executor's process counts them (held-out evaluations' calls included)
    if next(_calls) > WORKING_CALLS:
        raise ConnectionError("the calculator service is unavailable")
    tree = ast.parse(code.strip(), mode="eval").body
    if not (isinstance(tree, ast.Call) and getattr(tree.func, "id", None) == "print" and len(tree.args) == 1):
        raise ValueError("only print(EXPRESSION) is supported")
    return str(_value(tree.args[0]))
