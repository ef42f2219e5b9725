"""One episode's state while the agent loop (relay/agent/loop.py) runs it; AgentLoop._sample turns it
into a Sample when it ends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from relay.tools.calls import ToolCall
from relay.types import FinishReason


@dataclass
class Episode:
    id: str
    row: dict[str, Any]
    group_id: int
    max_total_tokens: int
    index: int = 0  # the episode's place in its group of group_size: 0..group_size-1
    group_size: int = 1
    prompt_ids: list[int] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)  # the prompt as messages (reward models re-render them)
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # per response token: the weights that produced it
    mask: list[int] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    turn_texts: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    token_rewards: dict[int, float] = field(default_factory=dict)
    env_first_observation: str = ""
    env_actions: list[str] = field(default_factory=list)
    env_observations: list[str] = field(default_factory=list)
    env_rewards: list[float] = field(default_factory=list)
    env_dones: list[bool] = field(default_factory=list)
    env_infos: list[dict] = field(default_factory=list)
    env_error: str | None = None
    tool_turns: int = 0
    finish: FinishReason | None = None
    # set by the current turn: what runs before the next one
    calls: list[ToolCall] = field(default_factory=list)
    parse_errors: list[str] = field(default_factory=list)
    action: str | None = None
    eos_token: int | None = None  # the stop token that ended the current turn
    # nudged replies: (start in response_ids, its token count, the bare reply's ids)
    swaps: list[tuple[int, int, list[int]]] = field(default_factory=list)

    @property
    def turns(self) -> int:
        return len(self.spans)

    @property
    def room(self) -> int:
        return self.max_total_tokens - len(self.response_ids)

    def swap_in_bare_replies(self) -> None:
        """Lay the episode out as trained: each nudged tool reply becomes the bare reply, so the
        model's later turns are learnt in the context a held-out episode shows (the learner's old
        logprobs are its own, on these tokens; the engine's logprobs after a swap were read in the
        nudged context). Turn spans and token rewards after a swap move with it."""
        for start, length, ids in reversed(self.swaps):
            end, shift = start + length, len(ids) - length
            self.response_ids[start:end] = ids
            self.logprobs[start:end] = [0.0] * len(ids)
            self.mask[start:end] = [0] * len(ids)
            self.versions[start:end] = self.versions[start : start + 1] * len(ids)
            self.spans = [(a + shift * (a >= end), b + shift * (b >= end)) for a, b in self.spans]
            self.token_rewards = {t + shift * (t >= end): r for t, r in self.token_rewards.items()}
        self.swaps = []


def tool_reply(e: Episode, name: str, ok: bool, text: str) -> str:
    """The text a tool call's result shows the model. A row may carry a nudge for exploration:
    {"tool": NAME, "share": S, "text": "... {output} ..."} rewrites a successful reply of that tool in
    the first S of its group's episodes (tool_chain's task.nudge; held-out rows never carry one).
    The episode is trained on with the bare reply (Episode.swap_in_bare_replies)."""
    nudge = e.row.get("nudge")
    if not (ok and nudge and nudge["tool"] == name and e.index < round(nudge["share"] * e.group_size)):
        return text
    return nudge["text"].replace("{output}", text.strip())


def capped_calls(calls: list[ToolCall], errors: list[str], cap: int) -> tuple[list[ToolCall], list[str]]:
    """A turn's first `cap` calls (tools.max_calls_per_turn) and its parse errors, plus one error for
    the calls past the cap, which never run: a turn of 4,000 calls costs `cap` tool runs."""
    if len(calls) <= cap:
        return calls, errors
    return calls[:cap], [*errors, f"{len(calls) - cap} tool calls past the limit of {cap} per turn were not run"]


def round_robin(counts: list[int]) -> list[tuple[int, int]]:
    """(episode, call) pairs for episodes with counts[i] calls each: every episode's first call, then
    every second one, and so on. The runners (executor threads, the tool client's requests) take
    calls in this order, so one episode's many or slow calls wait behind the other episodes' first
    calls rather than ahead of all of them."""
    return [(i, j) for j in range(max(counts, default=0)) for i, n in enumerate(counts) if j < n]
