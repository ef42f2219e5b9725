"""Does a model's chat template agree with the tokens relay's agent loop lays down?

    python -m relay.models.template_check MODEL    # tiny, tiny-math_tool, smollm2-135m, a folder, a .gguf

The agent loop is token-in/token-out (relay/agent/loop.py, relay/envs/chat.py): it renders the prompt once
with the generation prompt, appends the model's tokens, then appends only the tokens of what the
template writes after a model turn (tool results, the next user turn, the next generation prompt),
and never re-renders. A model served through its template (a chat API re-renders the whole
conversation every turn) sees the template's tokens, so training on relay's tokens is training on
what the model will be shown only if the two agree. Scripted conversations (a hermes tool call with
a tool turn, a plain multi-turn chat with reasoning, a tag tool call with its result inline) are
rendered through the model's own template, tokenizer only, and three properties are checked:

  prefix             the context before each turn (with the generation prompt when the model speaks
                     next) is a token prefix of the conversation that includes that turn: the
                     template does not re-render earlier turns once a later turn exists;
  generation prompt  the generation prompt, then the assistant's content tokens and the end token,
                     equal the template's rendering of that assistant turn;
  appended tokens    what relay appends after a model turn (ended by EOS, or at a stop string such
                     as </tool_call>), tokenized alone, equals the same span tokenized in context.

Each prints PASS or FAIL; a FAIL prints the first divergence with the tokens around it. Exit
status 0 when all pass, 1 otherwise (2 for a model that cannot be loaded).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

from relay.envs.chat import ChatFormat

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}
_CALL = json.dumps({"name": "calculator", "arguments": {"expression": "12*7"}})

# name -> (messages, the tools to render them with)
CONVERSATIONS: dict[str, tuple[list[dict], list[dict] | None]] = {
    "hermes tool call": (
        [
            {"role": "system", "content": "You are a careful assistant. Use the calculator for arithmetic."},
            {"role": "user", "content": "What is 12*7? Answer with the number."},
            {"role": "assistant", "content": f"<tool_call>\n{_CALL}\n</tool_call>"},
            {"role": "tool", "name": "calculator", "content": "84"},
            {"role": "assistant", "content": "12*7 = 84.\n\nThe answer is 84."},
        ],
        [CALCULATOR],
    ),
    "chat without tools": (
        [  # no system message: templates that add a default one must add it the same way every time
            {"role": "user", "content": "Think, then answer: what is 12*7?"},
            {"role": "assistant", "content": "<think>\n12*7 = 70 + 14 = 84\n</think>\n\n84"},
            {"role": "user", "content": "And 84 + 16?"},
            {"role": "assistant", "content": "The sum is 100.\n"},  # a trailing newline, as models write
        ],
        None,
    ),
}
# The tag parser's result (relay/tools/parsers.py) continues the model's own message: one
# assistant message holds the call, the appended result and the answer.
INLINE = ("<tool>print(12*7)</tool>", "\n<result>\n84\n</result>\n", "The answer is 84.")


@dataclass
class Check:
    name: str
    ok: bool
    where: str = ""  # which conversation and turn
    detail: str = ""  # the first divergence, tokens around it

    def line(self) -> str:
        head = f"{'PASS' if self.ok else 'FAIL'} {self.name}"
        return head if self.ok else f"{head} [{self.where}]\n{self.detail}"


def check_template(tokenizer) -> list[Check]:
    """The three checks (prefix, generation prompt, appended tokens), each at its first failure."""
    results = {name: Check(name, True) for name in ("prefix", "generation prompt", "appended tokens")}

    def fail(name: str, where: str, template: list[int], relay: list[int] | str) -> None:
        if results[name].ok:  # keep the first failure
            detail = f"    {relay}" if isinstance(relay, str) else divergence(tokenizer, template, relay)
            results[name] = Check(name, False, where, detail)

    for conv_name, (messages, tools) in CONVERSATIONS.items():
        check_conversation(tokenizer, conv_name, messages, tools, fail)
    fmt, eos = ChatFormat(tokenizer), tokenizer.eos_token_id
    prompt = [{"role": "user", "content": "What is 12*7? Run Python in <tool>...</tool>."}]
    whole = fmt.encode(render(tokenizer, [*prompt, {"role": "assistant", "content": "".join(INLINE)}], False, None))
    laid = fmt.prompt_ids(prompt) + [t for part in INLINE for t in fmt.encode(part)] + [eos]
    if whole[: len(laid)] != laid:
        fail("appended tokens", "tag tool call, the result inline in the assistant's message", whole, laid)
    return list(results.values())


def check_conversation(tokenizer, name: str, messages: list[dict], tools: list[dict] | None, fail) -> None:
    fmt, eos = ChatFormat(tokenizer, tools), tokenizer.eos_token_id

    def ids(msgs: list[dict], generation_prompt: bool) -> list[int]:
        return fmt.encode(render(tokenizer, msgs, generation_prompt, tools))

    for k in range(1, len(messages)):
        speaks = messages[k]["role"] == "assistant"
        context, whole = ids(messages[:k], speaks), ids(messages[: k + 1], False)
        if whole[: len(context)] != context:
            fail("prefix", f"{name}, before turn {k + 1} ({messages[k]['role']})", whole, context)
        if not speaks:
            continue
        content = fmt.encode(messages[k]["content"])
        if whole[: len(context) + len(content) + 1] != context + content + [eos]:
            fail("generation prompt", f"{name}, turn {k + 1} (assistant)", whole, context + content + [eos])
        following = next((j for j in range(k + 1, len(messages)) if messages[j]["role"] == "assistant"), None)
        if following is None:
            continue
        expected = ids(messages[:following], True)
        for eos_token in (eos, None):  # the turn ended with EOS, or at a stop string (</tool_call>)
            where = f"{name}, after turn {k + 1} ended by {'EOS' if eos_token is not None else 'a stop string'}"
            try:
                appended = fmt.observation_ids(messages[k + 1 : following], eos_token)
            except ValueError as e:  # relay/envs/chat.py cannot find where a model turn ends
                fail("appended tokens", where, expected, str(e))
                continue
            laid = context + content + ([eos] if eos_token is not None else []) + appended
            if laid != expected:
                fail("appended tokens", where, expected, laid)


def render(tokenizer, messages: list[dict], generation_prompt: bool, tools: list[dict] | None) -> str:
    """As relay/envs/chat.py renders: `tools` passed only when there are some."""
    kwargs = {"tools": tools} if tools else {}
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt, **kwargs)


def divergence(tokenizer, template: list[int], relay: list[int], around: int = 4) -> str:
    """The first token where `relay` leaves `template`, both shown with the tokens around it."""
    i = next((i for i, (a, b) in enumerate(zip(template, relay)) if a != b), min(len(template), len(relay)))

    def show(ids: list[int]) -> str:
        window = [repr(tokenizer.decode([t])) for t in ids[max(0, i - around) : i + around + 1]]
        at = min(i, len(ids)) - max(0, i - around)
        if at < len(window):
            window[at] = f"[{window[at]}]"
        else:
            window.append("[(end)]")
        return ("... " if i > around else "") + " ".join(window)

    return f"    at token {i}:\n    template: {show(template)}\n    relay:    {show(relay)}"


def failures(checks: list[Check]) -> list[Check]:
    return [c for c in checks if not c.ok]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "model", help="anything model.path accepts: tiny, tiny-math_tool, smollm2-135m, a folder, a .gguf"
    )
    parser.add_argument("--trust-remote-code", action="store_true")
    args = parser.parse_args(argv)
    from relay.config import ConfigError
    from relay.models.loading import load_tokenizer
    from relay.models.resolve import model_folder

    try:
        folder = model_folder(args.model, "MODEL")
        tokenizer = load_tokenizer(folder, args.trust_remote_code, key="MODEL")  # the tokenizer only: no weights
    except ConfigError as e:
        print("\n".join(f"template_check: error: {p}" for p in e.problems), file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"template_check: error: MODEL: {args.model}: cannot load its tokenizer ({type(e).__name__}: {e})")
        return 2
    if not tokenizer.chat_template:
        print(f"FAIL {args.model}: the tokenizer has no chat template (multi-turn runs need one)")
        return 1
    checks = check_template(tokenizer)
    print(f"{args.model} ({folder}):")
    for check in checks:
        print(check.line())
    return 1 if failures(checks) else 0


if __name__ == "__main__":
    sys.exit(main())
