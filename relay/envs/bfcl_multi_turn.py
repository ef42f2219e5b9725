"""task.name=bfcl, multi-turn categories: BFCL's multi_turn_base (and miss_func, miss_param,
long_context) rows as episodes in relay's environment pool, run against the bfcl-eval package's own
simulated APIs (GorillaFileSystem, MathAPI, TwitterAPI, TicketAPI, ...) and scored by its own
multi-turn checks (settings in relay/config/bfcl.py; single-turn rows: relay/envs/bfcl.py).

    system:    how to call, in the run's call format (tools.parser), and the row's function docs
    user:      Move 'final_report.pdf' within document directory to 'temp' directory in document. ...
    assistant: <tool_call>{"name": "cd", "arguments": {"folder": "document"}}</tool_call>
    tool:      {"current_working_directory": "document"}
    assistant: <tool_call>{"name": "mkdir", ...}</tool_call> ...  then a reply without a call
    user:      Perform a detailed search using grep ...             (the row's next user turn)
    ...                                                             reward 1 when BFCL's checks pass

The episode. A row's user turns come one after another. Within a user turn each model turn's
calls (parsed with tools.parser) run against the episode's own instances of the row's
involved_classes, made fresh by the package (execute_multi_turn_func_call, the row's
initial_config), and their results come back as "tool" messages; a model turn without a call ends
the user turn, and the next one comes (or the episode ends). multi_turn_miss_func rows add the
held-back functions' docs at their turn, in a user message (BFCL's own words after them). A user
turn of more than BFCL's MAXIMUM_STEP_LIMIT calling turns ends the episode with 0, as BFCL
force-quits it. An episode relay's limits cut (rollout.max_turns, max_total_tokens) gets 0 too:
these rows need many turns (about 4 user turns of 1 to 5 calls each; rollout.max_turns: 32,
max_total_tokens: 8192 or so, the function docs alone run to several thousand tokens).

Reward. BFCL's multi_turn_checker, turn by turn as it runs it: at the end of each user turn the
ground truth's calls of that turn run on ground-truth instances of the package's own (its
execute_multi_turn_func_call, on its data), and the package's state_checker (every public
attribute of every instance equal) and response_checker (each ground-truth result among the
model's results so far) judge the model's instances and results; a turn whose ground truth calls
something needs at least one calling model turn. 1.0 when every turn passes, else 0.0 (on the
last step). Invalid calls (a name not among the row's function docs, arguments the function does
not take, an exception in the simulated API, a call the parser cannot read) become the result the
model reads ("Error during execution: ..."), the episode goes on, and they are counted: each call is
in the step's info["tool_calls"], which the agent loop adds to Sample.tool_calls (agent/tool_calls,
agent/tool_errors).

Why relay does not hand the model's calls to the package: the package runs a call by eval() of a
call string, and a model wrote that string. Here the call is the parsed name and a dict of JSON
arguments: the bound method of that name, looked up with getattr only when the name is among the
row's function docs shown so far, called with the arguments as keywords (run_call). The checker's
comparisons are the package's own functions; only its loop that executes the model's calls is
written here again, around run_call. Results are written as the package writes them (a dict as
JSON, anything else with str), so they compare equal with the ground truth's.

Rows and the split. The package's own loaders give the rows (function docs filled in from
data/multi_turn_func_doc, miss_func's held-back docs by turn) and the ground truth. The four
categories are variants of one scenario (multi_turn_base_7, multi_turn_miss_func_7, ... share the
initial state and most questions), so the split key is the scenario, "multi_turn_<number>", hashed
with SHA-256 as relay/envs/bfcl.py hashes row ids: a held-out scenario is held out in every
category and never trained on in any variant. A row carries only its id, its category and the
call format; the environment loads the rest from the package.

Mixed with single-turn categories, every row runs here: a single-turn row is a one-step episode,
its system message the environment's prompt prefix, its user message(s) the first observation,
its reply scored by the same AST checker as relay/envs/bfcl.py.

Time limit. Each call runs in a fork of the EnvPool's process (relay/envs/forked_call.py) under
task.api_call_timeout_s of wall-clock time (env_config api_call_timeout_s; 0: in this process, no
limit): a call that computes for long on the model's arguments (MathAPI.power with a huge integer
exponent holds the interpreter inside one C call, which no thread or signal interrupts) is killed
at the limit and becomes a tool error like the others ("... took longer than 10 s and was
stopped"); whatever it changed dies with it. A call that returns brings its instances back: the
child's copies, pickled, replace the episode's.
"""

from __future__ import annotations

import inspect
import json
import time
import uuid
from functools import cache
from typing import Any

from relay.config.bfcl import API_CALL_TIMEOUT_S
from relay.envs.bfcl import check
from relay.envs.forked_call import ForkedCallFailed, ForkedCallTimeout, run_in_fork
from relay.tools.calls import ParseResult

INSTRUCTION = (
    "You act on a simulated system through a set of functions. The user asks for one thing at a time. "
    "Make one or more function calls to do what is asked; their results come back to you, and you may "
    "call again. When the request is done, or none of the functions fits, or a required value is "
    "missing, reply without a call, in a short sentence; then the next request comes. "
    "Write calls in this format:\n{syntax}"
)


@cache
def entries(category: str) -> dict[str, dict[str, Any]]:
    """{row id: row} of one multi-turn category, as the package loads it, its ground truth under "answer"."""
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    # relay's single-turn rows show the docs as BFCL's data has them, without the package's Python hint
    rows = load_dataset_entry(category, include_language_specific_hint=False)
    answers = {a["id"]: a["ground_truth"] for a in load_ground_truth_entry(category)}
    return {row["id"]: {**row, "answer": answers[row["id"]]} for row in rows}


def read_category(category: str) -> list[dict[str, Any]]:
    return list(entries(category).values())


def scenario(row: dict[str, Any]) -> str:
    """The split key: the four multi-turn categories' rows of one number are one scenario (module doc)."""
    return "multi_turn_" + row["id"].rsplit("_", 1)[1]


def as_row(category: str, row: dict[str, Any], instruction: str, parser: str) -> dict[str, Any]:
    return {
        "prompt": "\n".join(m["content"] for turn in row["question"] for m in turn),  # what it asks (overlap checks)
        "instruction": instruction,
        "ground_truth": {"dataset": category, "id": row["id"], "parser": parser},
    }


def tools_block(functions: list[dict]) -> str:
    return "<tools>\n" + "\n".join(json.dumps(f) for f in functions) + "\n</tools>"


def as_text(result: Any) -> str:
    """A result as the package writes it (execute_multi_turn_func_call), so results compare equal."""
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


def run_call(methods: dict[str, Any], allowed: set[str], name: str, arguments: Any) -> tuple[str, str | None]:
    """(result text, error or None) of one parsed call. Never eval: the package evals call strings,
    and a model wrote this one; the method is looked up by name only among the functions the row
    shows (`allowed`), on the episode's own instances, and gets the JSON arguments as keywords."""
    if name not in allowed or name not in methods:
        error = f"{name!r} is not one of the functions you can call"
    elif not isinstance(arguments, dict):
        error = f"the arguments of {name} must be a JSON object, got {type(arguments).__name__}"
    else:
        try:
            return as_text(getattr(methods[name], name)(**arguments)), None
        except Exception as e:  # bad arguments, or the simulated API raised: the model reads it
            error = str(e) or type(e).__name__
    return f"Error during execution: {error}", error


class BfclEnv:
    """One BFCL row per episode (multi-turn, or a single-turn row as one step); reset for the next."""

    def __init__(self, config=None):
        self.name = ""  # the package's instance names of the current episode start with it
        self.call_time_limit_s = float((config or {}).get("api_call_timeout_s", API_CALL_TIMEOUT_S))
        self.prefix = self.shown = ""

    def get_prompt_prefix(self) -> str:
        return self.prefix

    def get_state_description(self) -> str:
        return self.shown

    def reset(self, ground_truth: dict, messages: list[dict] | None = None, instruction: str = "") -> str:
        from relay.tools.parsers import get_parser

        self._forget()
        self.truth, self.single = ground_truth, messages is not None
        if self.single:  # a single-turn row in a mix: its reply is scored by the AST checker
            first = messages[0] if messages and messages[0]["role"] == "system" else None
            self.prefix = first["content"] if first else ""
            self.shown = "\n\n".join(m["content"] for m in messages if m is not first)
            return self.shown
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call

        self.parser = get_parser(ground_truth["parser"])
        self.row = entries(ground_truth["dataset"])[ground_truth["id"]]
        self.long_context = "long_context" in ground_truth["dataset"]
        self.functions = list(self.row["function"])
        self.prefix = f"{instruction}\n\nThe functions you can call:\n{tools_block(self.functions)}"
        # a name of this episode's own: the package keeps instances in its module's globals by name
        self.name = f"relay_{uuid.uuid4().hex}"
        _, instances = execute_multi_turn_func_call(
            [], self.row["initial_config"], self.row["involved_classes"], self.name, self.row["id"],
            long_context=self.long_context,
        )  # fmt: skip
        self._adopt(instances)
        self.turn, self.steps, self.turn_results, self.all_results = 0, 0, [], []
        self.verdict: dict[str, Any] = {"valid": True}
        self.shown = self._user_turn()
        return self.shown

    def step(self, action: str) -> tuple[Any, float, bool, dict]:
        if self.single:
            valid = bool(check(self.truth, action)["valid"])
            return "", float(valid), True, {}
        try:
            parsed = self.parser.parse(action)
        except Exception as e:  # hostile text met a parser bug: an unreadable call, as the agent loop has it
            parsed = ParseResult(errors=[f"the tool call could not be read ({type(e).__name__}); write it simpler"])
        if parsed.calls or parsed.errors:
            return self._calls(parsed)
        return self._end_turn()

    def _calls(self, parsed) -> tuple[list[dict], float, bool, dict]:
        from bfcl_eval.constants.default_prompts import MAXIMUM_STEP_LIMIT

        allowed = {f["name"] for f in self.functions}
        records, messages, results = [], [], []
        for call in parsed.calls:
            start = time.perf_counter()
            text, error = self._run(allowed, call.name, call.arguments)
            seconds = time.perf_counter() - start
            results.append(text)
            records.append(
                dict(name=call.name, arguments=call.arguments, ok=error is None, error=error, seconds=seconds)
            )
            messages.append({"role": "tool", "name": call.name, "content": self.parser.format_result(call, text)})
        for error in parsed.errors:
            records.append({"name": None, "arguments": None, "ok": False, "error": error, "seconds": 0.0})
            messages.append({"role": "tool", "name": "", "content": f"Error: {error}"})
        if results:  # a step the package's decoder would read: its results count in the checks
            self.turn_results.append(results)
        self.steps += 1
        info = {"tool_calls": records, "turn": self.turn}
        if self.steps > MAXIMUM_STEP_LIMIT:  # BFCL force-quits the row: it fails
            self._forget()
            reason = f"more than {MAXIMUM_STEP_LIMIT} calling turns for one request"
            info["verdict"] = {"valid": False, "error_type": "multi_turn:force_quit", "error_message": reason}
            return messages, 0.0, True, info
        return messages, 0.0, False, info

    def _run(self, allowed: set[str], name: str, arguments: Any) -> tuple[str, str | None]:
        """run_call under the time limit, in a forked child whose instances, once it returns, become
        the episode's; over the limit (or a child that dies), a tool error and nothing changed."""
        if not self.call_time_limit_s:
            return run_call(self.methods, allowed, name, arguments)

        def attempt():
            return *run_call(self.methods, allowed, name, arguments), self.instances

        try:
            text, error, instances = run_in_fork(attempt, self.call_time_limit_s)
        except (ForkedCallTimeout, ForkedCallFailed) as e:
            error = f"{name} {e}" if isinstance(e, ForkedCallTimeout) else f"{name} failed: {e}"
            return f"Error during execution: {error}", error
        self._adopt(instances)
        return text, error

    def _adopt(self, instances: dict[str, Any]) -> None:
        self.instances = instances
        self.methods = {  # method name -> instance, a later class winning as in the package's mapping
            name: instance
            for instance in instances.values()
            for name, _ in inspect.getmembers(instance, inspect.ismethod)
            if not name.startswith("_")
        }

    def _end_turn(self) -> tuple[str, float, bool, dict]:
        """The user turn is over: BFCL's checks of it (multi_turn_checker's order), then the next one."""
        if self.verdict["valid"]:
            self.verdict = self._check_turn()
        self.turn += 1
        self.steps, self.turn_results = 0, []
        if self.turn < len(self.row["question"]):
            self.shown = self._user_turn()
            return self.shown, 0.0, False, {"turn": self.turn}
        self._forget()
        valid = bool(self.verdict["valid"])
        self.shown = "All requests are done."
        return self.shown, float(valid), True, {"verdict": self.verdict}

    def _check_turn(self) -> dict[str, Any]:
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import response_checker, state_checker
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import (
            execute_multi_turn_func_call,
            is_empty_execute_response,
        )

        truth = self.row["answer"][self.turn]
        truth_results, truth_instances = execute_multi_turn_func_call(  # the package's data: its own eval
            truth, self.row["initial_config"], self.row["involved_classes"], self.name + "_ground_truth",
            self.row["id"], long_context=self.long_context, is_evaL_run=True,
        )  # fmt: skip
        self.all_results += [r for step in self.turn_results for r in step]
        if not truth:  # a turn the model cannot do (miss_param, miss_func): BFCL checks nothing here
            return {"valid": True}
        if is_empty_execute_response(self.turn_results):
            return {"valid": False, "error_type": "multi_turn:empty_turn_model_response", "turn": self.turn}
        verdict = state_checker(self.instances, truth_instances)
        if verdict["valid"]:
            verdict = response_checker(self.all_results, truth_results, self.turn)
        if verdict["valid"]:
            return {"valid": True}
        return {k: v for k, v in verdict.items() if k in ("valid", "error_type", "error_message")} | {"turn": self.turn}

    def _user_turn(self) -> str:
        from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC

        added = self.row.get("missed_function", {}).get(str(self.turn))
        if added:  # miss_func: the held-back functions arrive now (their turn asks nothing else)
            self.functions += added
            return f"{tools_block(added)}\n{DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC}"
        return "\n\n".join(m["content"] for m in self.row["question"][self.turn])

    def _forget(self) -> None:
        """Drop this episode's instances from the package's module globals, where
        execute_multi_turn_func_call keeps them by name (they would pile up, one set per episode)."""
        if not self.name:
            return
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

        kept = vars(multi_turn_utils)
        for key in [k for k in kept if k.startswith(self.name)]:
            del kept[key]
        self.name = ""

    def __del__(self):
        try:
            self._forget()
        except Exception:  # interpreter shutdown: the module may be gone already
            pass
