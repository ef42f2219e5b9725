"""The token layout of a conversation: prompt ids, and the ids of what follows a model turn.

    fmt = ChatFormat(tokenizer, tool_schemas)
    prompt = fmt.prompt_ids(messages)                          # the template with its generation prompt
    raw = ChatFormat(tokenizer, prompt_format="raw").prompt_ids([{"role": "user", "content": "3+4="}])
    obs = fmt.observation_ids([{"role": "tool", "content": "336"}], eos_token=tokenizer.eos_token_id)
    prompt, response, loss_mask = encode_scripted(fmt, ScriptedEpisode(messages, [ScriptedTurn("336")]))

Token-in, token-out: nothing earlier in an episode is ever re-tokenized. Observation tokens
come from tokenizing ONLY the text the chat template writes after the model's turn, found by
rendering the template around a placeholder assistant message and taking what follows it. That
text starts with the template's end-of-turn marker (ChatML: "<|im_end|>\\n"). When the model
ended its turn with that EOS token itself, its text is dropped from the delta; when it stopped
at a stop string (`</tool_call>`), the delta keeps it, so the closing tokens are observation
tokens with loss mask 0.

The agent loop (relay/agent/loop.py) lays out every episode this way; encode_scripted lays out a
scripted episode (ScriptedEpisode) the same way, for warm starts (relay/models/warm_start.py) and
tests. Environments describe their example episodes as ScriptedEpisode objects.

Plain prompts (task.prompt_format=raw) are for base models that were never taught a chat
layout: the prompt is the messages' text as is, tokenized with the tokenizer's own special-token
handling (a BOS where the tokenizer adds one), no template. "auto" is chat when the tokenizer has
a chat template, raw otherwise. Multi-turn episodes need a template to place observations in.
"""

from __future__ import annotations

import functools
import logging
import sys
from dataclasses import dataclass

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------ prompt format

PROMPT_FORMATS = ("chat", "raw", "auto")
_noticed_auto_raw = False  # the auto -> raw notice is printed once per process


def resolve_prompt_format(prompt_format: str, tokenizer) -> str:
    """The prompt format to use with this tokenizer, "chat" or "raw", for task.prompt_format. auto: chat
    when the tokenizer has a chat template, raw (printing a one-line notice, once) when it has none."""
    global _noticed_auto_raw
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"prompt_format: {prompt_format!r} is not one of {list(PROMPT_FORMATS)}")
    if prompt_format != "auto":
        return prompt_format
    if getattr(tokenizer, "chat_template", None):
        return "chat"
    if not _noticed_auto_raw:
        _noticed_auto_raw = True
        print(
            "relay: the tokenizer has no chat template: prompts are fed as plain text "
            "(task.prompt_format=auto -> raw; set task.prompt_format to choose)",
            file=sys.stderr,
            flush=True,
        )
    return "raw"


def raw_prompt_text(messages: list[dict]) -> str:
    """The text of a plain prompt: the messages' contents (a system prompt, then the user's text), one per line."""
    return "\n".join(m["content"] for m in messages)


# ------------------------------------------------------------------------------ chat format

_USER = "RELAYUSERPLACEHOLDER"
_ASSISTANT = "RELAYASSISTANTPLACEHOLDER"


class ChatFormat:
    """Prompt ids, and the token ids of what follows a model turn, for one tokenizer + chat template.
    prompt_format: "chat" (the template), "raw" (plain text, no template) or "auto" (resolve_prompt_format)."""

    def __init__(self, tokenizer, tools: list[dict] | None = None, prompt_format: str = "chat"):
        self.tokenizer = tokenizer
        self.tools = tools or None
        self.prompt_format = resolve_prompt_format(prompt_format, tokenizer)
        self._warned_eos = self._warned_roundtrip = False

    @functools.cached_property
    def turn_end(self) -> str:
        """What the template writes after an assistant message's content: ChatML "<|im_end|>\\n".
        Raises if the template does not render that content verbatim (then no observation can be
        placed after a model turn; prompts alone, as in single-turn rollouts, need no such thing)."""
        closed = self._render([{"role": "user", "content": _USER}, {"role": "assistant", "content": _ASSISTANT}], False)
        if closed.count(_ASSISTANT) != 1:
            raise ValueError(
                "the chat template does not render an assistant message's content verbatim; "
                "the agent loop cannot find where a model turn ends"
            )
        return closed[closed.index(_ASSISTANT) + len(_ASSISTANT) :]

    def _render(self, messages: list[dict], generation_prompt: bool) -> str:
        kwargs = {"tools": self.tools} if self.tools else {}
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt, **kwargs
        )

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        if self.prompt_format == "raw":  # the tokenizer's own special tokens (e.g. a BOS), exactly as for the text
            return self.tokenizer(raw_prompt_text(messages)).input_ids
        return self.encode(self._render(messages, True))

    def observation_text(self, observation: str | list[dict], eos_token: int | None) -> str:
        """The text to append after a model turn. `observation`: text that continues the model's
        own message (inline), or messages (tool / user turns) the template renders, followed by
        the generation prompt. eos_token: the stop token that ended the turn, or None."""
        if isinstance(observation, str):
            return observation
        full = self._render(
            [{"role": "user", "content": _USER}, {"role": "assistant", "content": _ASSISTANT}, *observation], True
        )
        if full.count(_ASSISTANT) != 1:
            raise ValueError("the chat template does not render an assistant message's content verbatim")
        text = full[full.index(_ASSISTANT) + len(_ASSISTANT) :]
        if eos_token is not None:
            eos = self.tokenizer.decode([eos_token])
            if text.startswith(eos):
                text = text[len(eos) :]  # the model already wrote it
            elif not self._warned_eos:
                self._warned_eos = True
                log.warning(
                    "the turn ended with %r but the chat template closes an assistant turn with %r; keeping both",
                    eos,
                    text[:20],
                )
        return text

    def observation_ids(self, observation: str | list[dict], eos_token: int | None) -> list[int]:
        text = self.observation_text(observation, eos_token)
        ids = self.encode(text)
        if not self._warned_roundtrip and self.tokenizer.decode(ids) != text:
            # SentencePiece tokenizers may add a leading space to a fragment: the trained tokens
            # are still exactly what the engine saw, but they decode to slightly different text.
            self._warned_roundtrip = True
            log.warning("this tokenizer does not round-trip observation text (%r); token ids stay exact", text[:40])
        return ids


# ------------------------------------------------------------------------------ trajectories (warm starts, tests)


@dataclass
class ScriptedTurn:
    text: str  # what the model writes in this turn
    eos: bool = True  # the turn ends with the EOS token (False: at a stop string such as </tool>)
    observation: str | list[dict] | None = None  # what follows (inline text or messages); None after the last turn


@dataclass
class ScriptedEpisode:
    prompt: list[dict]  # messages
    turns: list[ScriptedTurn]


def encode_scripted(fmt: ChatFormat, episode: ScriptedEpisode) -> tuple[list[int], list[int], list[int]]:
    """(prompt_ids, response_ids, loss_mask) laid out exactly as the agent loop lays out an episode."""
    eos = fmt.tokenizer.eos_token_id
    prompt = fmt.prompt_ids(episode.prompt)
    response, mask = [], []
    for turn in episode.turns:
        ids = fmt.encode(turn.text) + ([eos] if turn.eos else [])
        response += ids
        mask += [1] * len(ids)
        if turn.observation is not None:
            obs = turn.observation
            if isinstance(obs, str) and turn.eos:  # the message is closed: results go in a tool turn
                obs = [{"role": "tool", "content": obs}]
            ids = fmt.observation_ids(obs, eos if turn.eos else None)
            response += ids
            mask += [0] * len(ids)
    return prompt, response, mask
