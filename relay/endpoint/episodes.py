"""What the endpoint records of one episode, and how a new request's prompt is laid out from it.

Token-in, token-out through a chat API: a request's messages are the whole history, as text, but
the history's assistant turns were sampled as tokens that re-tokenizing their text need not give
back. So the endpoint never re-tokenizes a turn it produced. A new chat request whose messages
are an earlier call's messages, then one of that call's replies (as returned: same content, same
tool calls), then new messages (tool results, a user turn) continues that call: its prompt is the
earlier prompt + the sampled tokens + the token ids of only what the chat template writes after
an assistant turn for the new messages (relay/envs/chat.py, the agent loop's own layout). The
model is then fed exactly the tokens that are trained on.

A request that continues no earlier call (the agent rewrote, dropped or summarized its history,
or changed its tools) is rendered from its messages by the template, and starts a new chain: the
episode is split there (`splits` counts them). Every chain that nothing continued becomes one
training sample (relay/endpoint/samples.py), so a split episode trains as several samples, each
on the exact tokens the model saw. /v1/completions is continued by text: a prompt that starts
with an earlier prompt and its returned text continues it, only the new text being tokenized.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from relay.engines.base import SamplingParams
from relay.envs.chat import ChatFormat


@dataclass
class Choice:
    token_ids: list[int]
    logprobs: list[float]
    finish: str  # the engine's: "stop" | "length"
    version: int  # the weights that sampled it
    text: str  # what the reply carried (stop strings cut; chat: the content without its tool calls)
    eos: int | None  # the stop token that ended it, if one did
    message: dict | None = None  # chat: the assistant message as returned, in normal form (protocol.py)
    extra: str = ""  # completions: the sampled text after `text` (a stop string the reply left out)


@dataclass
class Call:
    prompt_ids: list[int]
    parent: tuple[int, int] | None  # (call, choice) it continues; None: rendered afresh
    kind: str  # "chat" | "completion"
    choices: list[Choice]
    messages: list[dict] | None = None  # chat: normal form
    tools: list[dict] | None = None
    prompt_text: str | None = None  # completions given text
    # chat, continuing a call: whether rendering its messages afresh would have given other ids than the
    # ones fed (the drift an endpoint that re-tokenizes history trains on); None where not checked
    drift: bool | None = None


@dataclass
class EpisodeRecord:
    id: str
    sampling: SamplingParams  # the rollout's: temperature, top_p, top_k, seed, stop
    max_total_tokens: int  # response tokens per chain (rollout.max_total_tokens)
    calls: list[Call] = field(default_factory=list)
    done: bool = False  # the agent program returned (the batcher stops waiting for it)

    @property
    def splits(self) -> int:
        """Requests after the first that continued no earlier call."""
        return max(0, sum(c.parent is None for c in self.calls) - 1)

    def root(self, parent: tuple[int, int] | None, prompt: list[int]) -> int:
        """The prompt length of the chain a prompt belongs to: its response tokens are what follows."""
        while parent is not None:
            call = self.calls[parent[0]]
            prompt, parent = call.prompt_ids, call.parent
        return len(prompt)

    def room(self, parent: tuple[int, int] | None, prompt: list[int]) -> int:
        return self.max_total_tokens - (len(prompt) - self.root(parent, prompt))

    # -- chat

    def chat_prompt(
        self, messages: list[dict], tools: list[dict] | None, fmt: ChatFormat, render: list[dict]
    ) -> tuple[list[int], tuple[int, int] | None]:
        """(prompt ids, the (call, choice) continued or None). `render`: the messages as the
        template reads them (relay/endpoint/protocol.py template_message)."""
        for ci in range(len(self.calls) - 1, -1, -1):
            call = self.calls[ci]
            n = len(call.messages or ())
            if call.kind != "chat" or call.tools != tools or len(messages) <= n + 1 or messages[:n] != call.messages:
                continue
            for k, choice in enumerate(call.choices):
                if same_assistant(messages[n], choice.message):
                    observation = fmt.observation_ids(render[n + 1 :], choice.eos)
                    return call.prompt_ids + choice.token_ids + observation, (ci, k)
        return fmt.prompt_ids(render), None

    @staticmethod
    def drifts(prompt: list[int], fmt: ChatFormat, render: list[dict]) -> bool | None:
        """Whether the template's rendering of the messages, re-tokenized, differs from `prompt`."""
        try:
            return fmt.prompt_ids(render) != prompt
        except Exception:  # a template that cannot render the history it was given back
            return None

    # -- completions

    def completion_prompt(
        self, prompt: str | list[int], encode, encode_fresh
    ) -> tuple[list[int], tuple[int, int] | None]:
        """(prompt ids, the (call, choice) continued or None) for a prompt given as text or as ids.
        encode: new text after a continued call; encode_fresh: a whole prompt (special tokens added)."""
        for ci in range(len(self.calls) - 1, -1, -1):
            call = self.calls[ci]
            if call.kind != "completion":
                continue
            for k, choice in enumerate(call.choices):
                if isinstance(prompt, list):
                    before = call.prompt_ids + choice.token_ids
                    if len(prompt) > len(before) and prompt[: len(before)] == before:
                        return list(prompt), (ci, k)
                elif call.prompt_text is not None:
                    shown = call.prompt_text + choice.text
                    rest = prompt[len(shown) :]
                    if prompt.startswith(shown) and rest.startswith(choice.extra) and len(rest) > len(choice.extra):
                        return call.prompt_ids + choice.token_ids + encode(rest[len(choice.extra) :]), (ci, k)
        return (list(prompt) if isinstance(prompt, list) else encode_fresh(prompt)), None

    # -- chains

    def leaves(self) -> list[tuple[int, int]]:
        """Every (call, choice) that no later call continued: the end of one chain each."""
        continued = {c.parent for c in self.calls if c.parent is not None}
        return [(ci, k) for ci, c in enumerate(self.calls) for k in range(len(c.choices)) if (ci, k) not in continued]

    def chain(self, leaf: tuple[int, int]) -> list[tuple[Call, Choice]]:
        """The (call, choice) pairs from the chain's first call to `leaf`."""
        out, at = [], leaf
        while at is not None:
            call = self.calls[at[0]]
            out.append((call, call.choices[at[1]]))
            at = call.parent
        return out[::-1]


def same_assistant(sent: dict, returned: dict | None) -> bool:
    """Whether an assistant message the agent sent back is the reply the endpoint returned (whitespace
    around the content aside; tool call ids, which agents may rewrite, aside)."""
    if returned is None or sent.get("role") != "assistant":
        return False
    return (sent.get("content") or "").strip() == (returned.get("content") or "").strip() and sent.get(
        "tool_calls", []
    ) == returned.get("tool_calls", [])


def before_stop(text: str, stops: tuple[str, ...]) -> tuple[str, str]:
    """(the text up to the first stop string, the rest): OpenAI's replies leave the stop string out."""
    cut = min((i for s in stops if (i := text.find(s)) != -1), default=-1)
    return (text, "") if cut == -1 else (text[:cut], text[cut:])


def tool_call_records(chain: list[tuple[Call, Choice]]) -> list[dict[str, Any]]:
    """The tool calls the model made along a chain, as Sample.tool_calls records (the agent ran them)."""
    out = []
    for turn, (_, choice) in enumerate(chain):
        for c in (choice.message or {}).get("tool_calls", []):
            out.append(
                {
                    "name": c["name"],
                    "arguments": c["arguments"],
                    "ok": True,
                    "error": None,
                    "seconds": 0.0,
                    "turn": turn,
                }
            )
    return out
