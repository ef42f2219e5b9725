"""What the endpoint sends back for generated tokens: a chat choice (its text, and the tool calls a
parser finds in it) and the reply body. Run on the endpoint's worker threads, never its event loop:
parsing a long hostile reply takes time linear in it, but time all the same."""

from __future__ import annotations

import time
import uuid

from relay.endpoint.episodes import Choice, before_stop
from relay.endpoint.protocol import json_arguments
from relay.tools.calls import ToolParser


def chat_choice(tokenizer, parser: ToolParser, c, stops: tuple[str, ...], parse: bool, version: int) -> Choice:
    """One completion as a chat choice: its text up to a stop string, and with `parse`, its tool calls."""
    text, _ = before_stop(tokenizer.decode(c.token_ids, skip_special_tokens=True), stops)
    message: dict = {"role": "assistant", "content": text}
    if parse:
        # formats that mark calls with special tokens (harmony, llama3_json, mistral) read them
        special = getattr(parser, "reads_special_tokens", False)
        raw_text = before_stop(tokenizer.decode(c.token_ids), stops)[0] if special else text
        try:
            parsed = parser.parse(raw_text)
        except Exception:  # a parser bug on hostile text: the reply is the text, no calls
            parsed = None
        # a call whose arguments JSON cannot carry stays text: the reply could not send it
        calls = [call for call in parsed.calls if json_arguments(call.arguments) is not None] if parsed else []
        if calls:
            # harmony's other channels, Llama's tag: not the reply's content
            content = "" if special else without(text, [call.raw for call in calls])
            message = {
                "role": "assistant",
                "content": content.strip(),
                "tool_calls": [{"name": call.name, "arguments": call.arguments} for call in calls],
            }
    ends = c.finish_reason == "stop" and c.token_ids and c.token_ids[-1] == tokenizer.eos_token_id
    eos = c.token_ids[-1] if ends else None
    return Choice(list(c.token_ids), list(c.logprobs), c.finish_reason, version, text, eos, message)


def without(text: str, pieces: list[str]) -> str:
    """text less the first occurrence of each piece, in order, in one pass (calls are found in text
    order; replacing them one by one copied the whole text per call)."""
    kept, pos = [], 0
    for piece in pieces:
        at = text.find(piece, pos)
        if at == -1:
            continue
        kept.append(text[pos:at])
        pos = at + len(piece)
    kept.append(text[pos:])
    return "".join(kept)


def reply_body(
    prefix: str, kind: str, model: str, choices: list[dict], prompt: list[int], completions, version: int
) -> dict:
    produced = sum(len(c.token_ids) for c in completions)
    return {
        "id": f"{prefix}-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {"prompt_tokens": len(prompt), "completion_tokens": produced, "total_tokens": len(prompt) + produced},
        "weight_version": version,
    }
