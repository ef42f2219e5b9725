"""The OpenAI wire format the endpoint reads and writes: requests checked by pydantic, errors in
OpenAI's shape, messages in one normal form (what the history check compares), replies.

A request field relay cannot honour exactly (sampling penalties, constrained tool choice,
streaming) is refused with a 400 naming it, never silently ignored: every token the endpoint
returns must be one the trained policy sampled, with its logprob. Top-k alternatives (chat's
`top_logprobs`, completions' `logprobs`) come from the distribution the sampled logprob is taken
from: log_softmax(logits / T) before top-p/top-k truncation, as the learner scores it.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

MAX_N = 64  # choices per request
MAX_STOP = 8  # stop strings per request
MAX_TOP_LOGPROBS = 20  # alternatives per token: OpenAI's limit for chat (vLLM's default max_logprobs)
# Integers longer than this are refused (400) unconverted: conversion is quadratic in the digits,
# and Python's own guard (sys.set_int_max_str_digits) can be switched off process-wide.
MAX_INT_DIGITS = 4300
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.manual_seed takes


class ApiError(Exception):
    """An error reply: HTTP status and OpenAI's {"error": {message, type, param, code}}."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict:
        kind = {401: "authentication_error", 404: "not_found_error"}.get(self.status, "invalid_request_error")
        if self.status >= 500:
            kind = "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = ""  # any name: the endpoint serves one model (the policy being trained)
    n: int = Field(1, ge=1, le=MAX_N)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1, le=2**31)
    stop: str | list[str] | None = Field(None, validate_default=True)  # a list after validation
    seed: int | None = Field(None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    stream: bool = False
    # accepted only at their neutral values: anything else would sample from another distribution
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    user: str | None = None  # accepted and ignored, as OpenAI's own servers log it

    @field_validator("stop")
    @classmethod
    def _stops(cls, v):
        stops = [v] if isinstance(v, str) else list(v or [])
        if len(stops) > MAX_STOP or not all(stops):
            raise ValueError(f"at most {MAX_STOP} non-empty stop strings")
        return stops

    def refuse_unsupported(self) -> None:
        if self.stream:
            raise ApiError(400, "stream: streaming is not supported; send stream=false", "stream")
        for key in ("frequency_penalty", "presence_penalty"):
            if getattr(self, key):
                raise ApiError(400, f"{key}: only 0 is supported (the trained policy samples without penalties)", key)


class ChatRequest(_Request):
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=2**31)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    alternatives_field: ClassVar[str] = "top_logprobs"  # the field that asks for top-k alternatives

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.top_logprobs and not self.logprobs:  # as OpenAI's own API answers it
            raise ApiError(400, "top_logprobs: needs logprobs=true", "top_logprobs")
        if self.tool_choice not in (None, "auto", "none"):
            raise ApiError(400, "tool_choice: 'auto' or 'none' (relay does not constrain decoding)", "tool_choice")
        for i, tool in enumerate(self.tools or []):
            fn = tool.get("function")
            if tool.get("type") != "function" or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise ApiError(400, f'tools.{i}: expected {{"type": "function", "function": {{"name": ...}}}}', "tools")

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def alternatives(self) -> int:
        return (self.top_logprobs or 0) if self.logprobs else 0


class CompletionRequest(_Request):
    prompt: str | list[int] = Field(min_length=1)
    # OpenAI's legacy API takes at most 5; relay takes chat's limit (so does vLLM)
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False
    alternatives_field: ClassVar[str] = "logprobs"

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.echo:
            raise ApiError(400, "echo: not supported", "echo")

    @property
    def token_limit(self) -> int | None:
        return self.max_tokens

    @property
    def alternatives(self) -> int:
        return self.logprobs or 0


def _parse_int(digits: str) -> int:
    if len(digits) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(digits)} digits (at most {MAX_INT_DIGITS})")
    return int(digits)


def parse_json(body: bytes) -> Any:
    """The request body's JSON, or ApiError(400) for every way it can fail: bytes that are not UTF-8,
    text that is not JSON, nesting past the recursion limit, an integer of too many digits."""
    try:
        return json.loads(body, parse_int=_parse_int)
    except RecursionError:
        raise ApiError(400, "the request body is not valid JSON: nested too deeply") from None
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors too
        raise ApiError(400, f"the request body is not valid JSON: {str(e)[:200]}") from None


def parse_request(cls: type[_Request], body: Any) -> _Request:
    """The request, or ApiError(400) naming the first bad field in one line."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    try:
        request = cls.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "body"
        message = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
        raise ApiError(400, f"{where}: {message}", where.split(".")[0]) from None
    request.refuse_unsupported()
    return request


# ------------------------------------------------------------------------------ messages

ROLES = ("system", "developer", "user", "assistant", "tool")


def content_text(content: Any, where: str) -> str:
    """A message's content as text: a string, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise ApiError(400, f"{where}.content: only text content is supported (a string or text parts)", "messages")


def normal_message(m: Any, i: int) -> dict:
    """One message in the form relay compares and renders: role, content text, and for an assistant
    its tool calls as (name, arguments dict); a tool result keeps its tool_call_id."""
    where = f"messages.{i}"
    if not isinstance(m, dict) or m.get("role") not in ROLES:
        raise ApiError(400, f"{where}.role: must be one of {', '.join(ROLES)}", "messages")
    role = "system" if m["role"] == "developer" else m["role"]
    out: dict[str, Any] = {"role": role, "content": content_text(m.get("content"), where)}
    if role == "assistant" and m.get("tool_calls"):
        out["tool_calls"] = [_call(c, f"{where}.tool_calls.{k}") for k, c in enumerate(m["tool_calls"])]
    if role == "tool":
        out["tool_call_id"] = str(m.get("tool_call_id") or "")
    if m.get("name") is not None:
        out["name"] = str(m["name"])
    return out


def _call(c: Any, where: str) -> dict:
    fn = c.get("function") if isinstance(c, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ApiError(400, f'{where}: expected {{"function": {{"name": ..., "arguments": ...}}}}', "messages")
    args = fn.get("arguments") or {}
    if isinstance(args, str):
        try:
            args = json.loads(args, parse_int=_parse_int) if args.strip() else {}
        except (ValueError, RecursionError):  # not JSON, nested too deeply, a huge integer
            raise ApiError(400, f"{where}.function.arguments: not valid JSON", "messages") from None
    if not isinstance(args, dict):
        raise ApiError(400, f"{where}.function.arguments: must be a JSON object", "messages")
    return {"name": fn["name"], "arguments": args}


def template_message(m: dict) -> dict:
    """A normal message as chat templates read it (tool calls in the Hugging Face layout)."""
    out = dict(m)
    if "tool_calls" in m:
        out["tool_calls"] = [{"type": "function", "function": dict(c)} for c in m["tool_calls"]]
    return out


# ------------------------------------------------------------------------------ replies


class TokenTexts(dict):
    """Token id -> its text, decoded once per reply (k alternatives per token repeat ids a lot)."""

    def __init__(self, tokenizer):
        super().__init__()
        self.tokenizer = tokenizer

    def __missing__(self, token: int) -> str:
        self[token] = text = self.tokenizer.decode([token])
        return text


def chat_logprobs(texts: TokenTexts, ids: list[int], logprobs: list[float], top: list | None) -> dict:
    """Chat's choices[i].logprobs: one entry per sampled token, each with its alternatives (the
    k most likely, most likely first; [] when none were asked for)."""

    def entry(token: int, lp: float) -> dict:
        text = texts[token]
        return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8", "surrogatepass"))}

    content = []
    for j, (t, lp) in enumerate(zip(ids, logprobs)):
        alternatives = [entry(a, alp) for a, alp in top[j]] if top else []
        content.append({**entry(t, lp), "top_logprobs": alternatives})
    return {"content": content}


def completion_logprobs(texts: TokenTexts, ids: list[int], logprobs: list[float], top: list | None) -> dict:
    """Completions' choices[i].logprobs: per token its text, logprob and offset in the text, and
    with alternatives asked for, a {text: logprob} of the k most likely plus the sampled token (as
    OpenAI's legacy API and vLLM answer: up to k + 1 entries; tokens of the same text share one)."""
    tokens = [texts[t] for t in ids]
    offsets = [sum(len(t) for t in tokens[:k]) for k in range(len(tokens))]
    alternatives = None
    if top:
        alternatives = [
            {**{texts[a]: alp for a, alp in top[j]}, texts[t]: lp} for j, (t, lp) in enumerate(zip(ids, logprobs))
        ]
    return {"tokens": tokens, "token_logprobs": list(logprobs), "top_logprobs": alternatives, "text_offset": offsets}


def json_arguments(arguments: Any) -> str | None:
    """A call's arguments as the JSON text the wire carries, or None where JSON cannot carry them
    (bytes, complex numbers, sets, NaN, nesting past the recursion limit)."""
    try:
        return json.dumps(arguments, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


def wire_tool_calls(calls: list[dict], call_ids: list[str]) -> list[dict]:
    """Calls as the reply carries them; a call whose arguments JSON cannot carry is left out (the
    endpoint keeps such a call's text as content: relay/endpoint/replies.py)."""
    out = []
    for c, i in zip(calls, call_ids):
        if (arguments := json_arguments(c["arguments"])) is not None:
            out.append({"id": i, "type": "function", "function": {"name": c["name"], "arguments": arguments}})
    return out


Finish = Literal["stop", "length", "tool_calls"]
