"""task.name=bfcl: which Berkeley Function Calling Leaderboard categories make the rows
(relay/envs/bfcl.py), and the checks that name a bad setting in one line before any actor starts.

`task.categories: [simple_python, multiple, parallel]` (equal weights) or a weighted mix
`task.categories: {simple_python: 2, parallel: 1}`; empty: DEFAULT_CATEGORIES. The names are
BFCL's own, so `reward/<category>` and `eval/<category>/accuracy` read like the leaderboard's columns.
A multi-turn category (`task.categories: [multi_turn_base]`) makes the task an environment task:
loading sets task.env to BfclEnv (with_bfcl_env), whose episodes run the model's calls against the
package's simulated APIs (relay/envs/bfcl_multi_turn.py).
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any

PACKAGE_PIN = "bfcl-eval==2026.3.23"
# --no-deps: the package declares numpy==1.26.4, sentence-transformers, faiss and several vendors'
# SDKs for its own inference runners; the data and the AST checker relay reads need none of them.
INSTALL = f"pip install --no-deps '{PACKAGE_PIN}' (scripts/setup.sh installs it)"
# Single-turn categories whose rows one model turn answers: the AST categories (BFCL's checker
# compares the calls with the row's possible answers) and the irrelevance ones (right when no call
# is made). Java and JavaScript rows are left out: their checker wants every argument as a string
# of Java / JavaScript source, a format none of relay's tool-call parsers writes.
AST_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)
# Multi-turn categories run as episodes against the package's simulated APIs (relay/envs/bfcl_multi_turn.py).
MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
CATEGORIES = (*AST_CATEGORIES, "irrelevance", "live_irrelevance", *MULTI_TURN_CATEGORIES)
ENV_PATH = "relay.envs.bfcl_multi_turn:BfclEnv"
DEFAULT_CATEGORIES = ("simple_python", "multiple", "parallel")
# The package's calls take milliseconds; a model's arguments can make one compute for hours (power)
API_CALL_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class BfclFields:
    """TaskConfig's fields for task.name=bfcl."""

    categories: Any = None  # [CATEGORY, ...] or {CATEGORY: weight}; unset: DEFAULT_CATEGORIES
    # Multi-turn: wall-clock seconds one simulated API call may take (in a forked child); 0: no limit
    api_call_timeout_s: float = API_CALL_TIMEOUT_S


# The tool-call formats the system prompt can show and the reward can read (tools.parser)
CALL_FORMATS = ("hermes", "json", "function_call", "pythonic")


def categories(task) -> dict[str, float]:
    """{category: weight} of a valid config: a list weighs each one 1, nothing means DEFAULT_CATEGORIES."""
    given = task.categories or DEFAULT_CATEGORIES
    if isinstance(given, str):  # task.categories=multi_turn_base: one category
        given = [given]
    if isinstance(given, dict):
        return {name: float(w) for name, w in given.items()}
    return {name: 1.0 for name in given}


def multi_turn(task) -> bool:
    """Whether task.categories names a multi-turn category (read before validation: any value)."""
    given = [task.categories] if isinstance(task.categories, str) else task.categories
    return isinstance(given, (list, tuple, dict)) and any(name in MULTI_TURN_CATEGORIES for name in given)


def with_bfcl_env(task):
    """task.name=bfcl with a multi-turn category: task.env is BfclEnv, which runs every row of the
    mix (a single-turn row as one step). A task.env the user set is left for validate to name."""
    if task.name != "bfcl" or task.env not in (None, ENV_PATH) or not multi_turn(task):
        return task
    return dataclasses.replace(task, env=ENV_PATH, env_config={"api_call_timeout_s": task.api_call_timeout_s})


def validate_bfcl(task, tools) -> list[str]:
    if task.name != "bfcl":
        return [f"task.categories: only task.name=bfcl reads it, not {task.name!r}"] if task.categories else []
    p: list[str] = []
    given = task.categories or ()
    if isinstance(given, str):
        given = [given]
    if not isinstance(given, (list, tuple, dict)):
        p.append(f"task.categories: expected a list of categories or a mapping {{category: weight}}, got {given!r}")
        given = ()
    for name in given:
        if name not in CATEGORIES:
            close = difflib.get_close_matches(str(name), CATEGORIES, n=3, cutoff=0.4)
            hint = f"closest: {', '.join(close)}" if close else f"choose from {', '.join(CATEGORIES)}"
            p.append(f"task.categories: {name!r} is not a BFCL category relay runs ({hint})")
        elif isinstance(given, dict):
            weight = given[name]
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
                p.append(f"task.categories.{name}: the weight must be a number > 0, got {weight!r}")
    limit = task.api_call_timeout_s
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 <= limit < float("inf"):
        p.append(f"task.api_call_timeout_s: must be a finite number of seconds >= 0 (0: no limit), got {limit!r}")
    if tools.parser not in CALL_FORMATS:
        p.append(
            f"tools.parser: task.name=bfcl shows and reads calls in one of {', '.join(CALL_FORMATS)}, "
            f"got {tools.parser!r} (hermes: <tool_call>{{...}}</tool_call>)"
        )
    if tools.enabled:
        p.append(
            "tools.enabled: task.name=bfcl's environment runs the calls of its multi-turn rows itself; set tools.enabled=false"
            if multi_turn(task)
            else "tools.enabled: task.name=bfcl checks the calls of one turn and runs none; set tools.enabled=false"
        )
    if multi_turn(task) and task.env != ENV_PATH:
        p.append("task.env: task.name=bfcl runs its multi-turn categories in its own environment; leave task.env out")
    try:
        import bfcl_eval  # noqa: F401
    except ImportError:
        p.append(f"task.name: bfcl needs the bfcl-eval package: {INSTALL}")
    return p
