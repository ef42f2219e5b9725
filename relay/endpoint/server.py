"""An OpenAI-compatible HTTP endpoint served from a rollout worker's engine.

    server = EndpointServer(engine, host="127.0.0.1", parser="hermes", max_tokens=64)
    openai.OpenAI(base_url=server.url + "/v1", api_key=server.token)            # any client
    server.open(["ep-0"], sampling); openai.OpenAI(base_url=server.episode_url("ep-0"), ...)
    records = server.close(["ep-0"])                                             # its calls, token-exact

Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, and the same under
/episodes/<id>/v1/ for an episode's client (task.agent: relay/endpoint/rollout.py), whose calls are
recorded with their exact token ids (relay/endpoint/episodes.py). Every request needs
`Authorization: Bearer <token>` (401 otherwise). A bad request is a 400 in OpenAI's error shape
naming the field; a failure inside relay is a 500 with one line; never a traceback.

Hostile clients are bounded (relay/endpoint/connections.py): a connection that sends no whole
request head within idle_timeout_s (of opening, or of its last reply) is closed, a body must
arrive within body_timeout_s (else 408), and open connections are capped per process and per
peer address. Reading a request and writing its reply (JSON, templates, tool-call parsing,
detokenizing) run on a small thread pool, not on the event loop: one slow reply never holds up
another client's request.

Inside an episode the rollout's sampling applies (rollout.temperature, top_p, top_k, seed; greedy
in evaluations), whatever the request asks: the learner scores the tokens under that policy.
A request's own settings apply to calls outside episodes. The aiohttp server runs on a thread of
its own; engine calls run on the batcher's thread (relay/endpoint/batcher.py), behind the engine's
fence (relay/endpoint/fence.py): no request is generated while weights load, and every reply says
which weights generated it (`weight_version` in the body, the x-relay-weight-version header).
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from urllib.parse import quote

from aiohttp import web

from relay.endpoint.auth import authorized, new_token
from relay.endpoint.batcher import GenerateQueue
from relay.endpoint.connections import Gate, JsonErrors, OncePerInterval, connection_cap
from relay.endpoint.episodes import Call, Choice, EpisodeRecord, before_stop
from relay.endpoint.fence import fenced
from relay.endpoint.protocol import (
    ApiError,
    ChatRequest,
    CompletionRequest,
    TokenTexts,
    chat_logprobs,
    completion_logprobs,
    normal_message,
    parse_json,
    parse_request,
    template_message,
    wire_tool_calls,
)
from relay.endpoint.replies import chat_choice, reply_body
from relay.engines.base import Engine, SamplingParams
from relay.envs.chat import ChatFormat
from relay.tools.parsers import get_parser

MAX_BODY_BYTES = 16 * 1024 * 1024
LINGER_S = 1.0
MAX_FORMATS = 64  # chat formats kept, one per distinct `tools` list (a client may send a new one each time)
WEIGHT_VERSION_HEADER = "x-relay-weight-version"  # on every generated reply: the weights that generated it
UNBOUNDED = 2**31  # the token room of a request outside episodes (the model's context still bounds it)


class EndpointServer:
    def __init__(
        self,
        engine: Engine,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        parser: str = "hermes",
        model_name: str = "relay",
        max_tokens: int = 64,
        max_total_tokens: int = 512,
        batch_wait_s: float = 0.005,
        token: str | None = None,
        idle_timeout_s: float = 30.0,
        body_timeout_s: float = 30.0,
        max_connections: int = 1024,
        max_connections_per_peer: int = 512,
    ):
        """max_tokens: a call's token limit in an episode, and the default elsewhere; max_total_tokens:
        an episode chain's response tokens (rollout.max_total_tokens); token: the run's bearer token
        (relay/endpoint/auth.py), or None for a random one of this server's own; the rest: endpoint.*
        (relay/config/endpoint.py)."""
        self.engine, self.tokenizer = fenced(engine), engine.tokenizer  # weight loads go through engine.fence
        self.parser, self.model_name = get_parser(parser), model_name
        self.max_tokens, self.max_total_tokens = max_tokens, max_total_tokens
        self.token = token or new_token()
        self.episodes: dict[str, EpisodeRecord] = {}
        self.records_lock = threading.Lock()
        self.formats: OrderedDict[str, ChatFormat] = OrderedDict()
        self.idle_timeout_s, self.body_timeout_s = idle_timeout_s, body_timeout_s
        self.gate = Gate(
            connection_cap(max_connections), min(max_connections_per_peer, connection_cap(max_connections))
        )
        self.requests = 0  # answered requests (200s), for __repr__-style reporting
        self.queue = GenerateQueue(self.engine, batch_wait_s, self._waiting_for)
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, args=(host, port), name="relay-endpoint-http", daemon=True)
        self.thread.start()
        self._started.wait(timeout=60)
        if self._error is not None:
            self.queue.close()
            raise OSError(f"the endpoint cannot listen on {host}:{port}: {self._error}")
        self.host = host

    # -- life

    def _serve(self, host: str, port: int) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.set_exception_handler(OncePerInterval())
        self.loop.set_default_executor(ThreadPoolExecutor(4, thread_name_prefix="relay-endpoint-work"))
        app = web.Application(middlewares=[self._errors, self._auth], client_max_size=MAX_BODY_BYTES)
        for prefix in ("", "/episodes/{episode}"):
            app.router.add_get(prefix + "/v1/models", self._models)
            app.router.add_post(prefix + "/v1/chat/completions", self._chat)
            app.router.add_post(prefix + "/v1/completions", self._completions)
        app.router.add_post("/episodes/{episode}/v1/done", self._done)
        # keepalive_timeout: aiohttp closes a connection without a whole request head this long after
        # it opened or last replied (silent, cut-short and idle keep-alive connections alike);
        # lingering_time: after an answer sent before the body ended (408, 413), the rest is read for
        # at most this long, so the client sees the answer rather than a reset (10 s by default)
        limits = dict(access_log=None, keepalive_timeout=self.idle_timeout_s, lingering_time=LINGER_S)
        self.runner = web.AppRunner(app, **limits)
        try:
            self.loop.run_until_complete(self.runner.setup())
            # not web.TCPSite: each connection passes the Gate (connection caps) before aiohttp sees it
            handlers = lambda: JsonErrors(self.runner.server, loop=self.loop, **limits)  # noqa: E731
            listen = self.loop.create_server(self.gate.factory(handlers), host, port, backlog=1024)
            self.listener = self.loop.run_until_complete(listen)
            self.port = self.listener.sockets[0].getsockname()[1]
        except BaseException as e:  # the port is taken, the address is not this machine's, ...
            self._error = e
            self._started.set()
            return
        self._started.set()
        self.loop.run_forever()
        self.listener.close()
        self.loop.run_until_complete(self.runner.cleanup())
        self.loop.run_until_complete(self.loop.shutdown_default_executor())

    def shutdown(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=30)
        self.queue.close()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def episode_url(self, episode_id: str) -> str:
        """An episode's base URL for an OpenAI client (its calls are recorded)."""
        return f"{self.url}/episodes/{quote(episode_id, safe='')}/v1"

    # -- episodes

    def open(self, episode_ids: list[str], sampling: SamplingParams) -> None:
        with self.records_lock:
            for eid in episode_ids:
                if eid in self.episodes:
                    raise ValueError(f"episode {eid!r} is already open")
                self.episodes[eid] = EpisodeRecord(eid, sampling, self.max_total_tokens)

    def close(self, episode_ids: list[str]) -> dict[str, EpisodeRecord]:
        with self.records_lock:
            return {eid: self.episodes.pop(eid) for eid in episode_ids}

    def _waiting_for(self) -> int:
        with self.records_lock:
            return sum(not r.done for r in self.episodes.values())

    def _episode(self, request: web.Request) -> EpisodeRecord | None:
        eid = request.match_info.get("episode")
        if eid is None:
            return None
        with self.records_lock:
            record = self.episodes.get(eid)
        if record is None:
            raise ApiError(404, f"episode {eid!r} is not running on this endpoint", code="episode_not_found")
        return record

    # -- middleware

    @web.middleware
    async def _errors(self, request: web.Request, handler):
        try:
            return await handler(request)
        except ApiError as e:
            return web.json_response(e.body(), status=e.status)
        except web.HTTPException as e:  # unknown routes, methods
            return web.json_response(
                ApiError(e.status, f"{request.method} {request.path}: {e.reason}").body(), status=e.status
            )
        except Exception as e:  # a failure inside relay: one line, the engine's or the template's
            return web.json_response(ApiError(500, f"{type(e).__name__}: {e}").body(), status=500)

    @web.middleware
    async def _auth(self, request: web.Request, handler):
        if not authorized(request.headers.get("Authorization", ""), self.token):
            raise ApiError(
                401, "missing or wrong API key: send Authorization: Bearer <the run's token>", code="invalid_api_key"
            )
        guard = self.gate.busy(request.transport)  # a connection answering a request is never evicted as idle
        if guard is None:
            return await handler(request)
        guard.requests += 1
        try:
            return await handler(request)
        finally:
            guard.requests -= 1

    # -- routes

    async def _models(self, request: web.Request) -> web.Response:
        self._episode(request)
        model = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "relay"}
        return web.json_response({"object": "list", "data": [model]})

    async def _done(self, request: web.Request) -> web.Response:
        record = self._episode(request)
        with self.records_lock:
            record.done = True
        return web.json_response({"ok": True})

    async def _body(self, request: web.Request) -> bytes:
        try:
            async with asyncio.timeout(self.body_timeout_s):
                return await request.read()
        except TimeoutError:
            raise ApiError(408, f"the request body did not arrive within {self.body_timeout_s:g} s") from None

    async def _off_loop(self, fn, *args):
        """fn(*args) on the worker threads: the event loop keeps serving other connections meanwhile."""
        return await self.loop.run_in_executor(None, fn, *args)

    def _format(self, tools: list[dict] | None) -> ChatFormat:
        key = json.dumps(tools, sort_keys=True)
        with self.records_lock:
            fmt = self.formats.get(key)
            if fmt is not None:
                self.formats.move_to_end(key)
                return fmt
        fmt = ChatFormat(self.tokenizer, tools, "chat")
        with self.records_lock:
            self.formats[key] = fmt
            while len(self.formats) > MAX_FORMATS:
                self.formats.popitem(last=False)
        return fmt

    def _sampling(self, req, record: EpisodeRecord | None, room: int, prompt_len: int) -> SamplingParams:
        k, most = req.alternatives, getattr(self.engine, "max_top_logprobs", 0)
        if k > most:  # engines without alternatives (sglang, scripted test engines) have none to give
            field = req.alternatives_field
            raise ApiError(400, f"{field}: this endpoint's engine gives at most {most} alternatives per token", field)
        limit = req.token_limit
        context = getattr(self.tokenizer, "model_max_length", None)
        if isinstance(context, int) and context < 10**7:  # a real limit (tokenizers without one say 1e30)
            if prompt_len >= context:
                raise ApiError(
                    400,
                    f"the prompt has {prompt_len} tokens; the model's context is {context}",
                    "messages",
                    "context_length_exceeded",
                )
            room = min(room, context - prompt_len)
            limit = min(limit or self.max_tokens, room)
        if record is None:
            t = 1.0 if req.temperature is None else req.temperature
            return SamplingParams(
                n=req.n,
                temperature=t,
                top_p=req.top_p or 1.0,
                max_tokens=limit or self.max_tokens,
                stop=tuple(req.stop),
                seed=req.seed,
                top_logprobs=k,
            )
        if room < 1:
            raise ApiError(
                400,
                f"this episode's conversation has used its {self.max_total_tokens} response tokens (rollout.max_total_tokens)",
                code="context_length_exceeded",
            )
        s = record.sampling
        cap = min(self.max_tokens, room)
        stop = tuple(dict.fromkeys((*req.stop, *s.stop)))
        return replace(s, n=req.n, max_tokens=min(limit or cap, cap), stop=stop, top_logprobs=k)

    async def _generate(self, prompt: list[int], sampling: SamplingParams, in_episode: bool):
        return await asyncio.wrap_future(self.queue.submit(prompt, sampling, in_episode))

    async def _answer(self, request: web.Request, read_prompt, write_reply) -> web.Response:
        """One request: its prompt read and its reply written off the event loop, the generation queued."""
        record = self._episode(request)
        body = await self._body(request)
        turn = await self._off_loop(read_prompt, body, record)
        completions, version = await self._generate(turn[-2], turn[-1], record is not None)
        return await self._off_loop(write_reply, turn, record, completions, version)

    async def _chat(self, request: web.Request) -> web.Response:
        return await self._answer(request, self._chat_prompt, self._chat_reply)

    def _chat_prompt(self, body: bytes, record: EpisodeRecord | None) -> tuple:
        req = parse_request(ChatRequest, parse_json(body))
        messages = [normal_message(m, i) for i, m in enumerate(req.messages)]
        tools = req.tools or None
        render = [template_message(m) for m in messages]
        try:
            fmt = self._format(tools)
            if record is None:
                prompt, parent = fmt.prompt_ids(render), None
            else:
                with self.records_lock:
                    prompt, parent = record.chat_prompt(messages, tools, fmt, render)
        except ApiError:
            raise
        except Exception as e:  # jinja's TemplateError and the like: the template refused these messages
            raise ApiError(400, f"messages: the model's chat template cannot render them ({e})", "messages") from None
        room = record.room(parent, prompt) if record else UNBOUNDED
        sampling = self._sampling(req, record, room, len(prompt))
        return req, messages, tools, fmt, render, parent, prompt, sampling

    def _chat_reply(self, turn: tuple, record: EpisodeRecord | None, completions, version: int) -> web.Response:
        req, messages, tools, fmt, render, parent, prompt, sampling = turn
        parse = bool(tools) and req.tool_choice != "none"
        choices = [chat_choice(self.tokenizer, self.parser, c, sampling.stop, parse, version) for c in completions]
        if record is not None:
            drift = None if parent is None else record.drifts(prompt, fmt, render)
            with self.records_lock:
                record.calls.append(Call(prompt, parent, "chat", choices, messages=messages, tools=tools, drift=drift))
        wire, texts = [], TokenTexts(self.tokenizer)
        for i, (c, choice) in enumerate(zip(completions, choices)):
            message = {"role": "assistant", "content": choice.message["content"]}
            finish = c.finish_reason
            if calls := choice.message.get("tool_calls"):
                message["tool_calls"] = wire_tool_calls(calls, [f"call_{uuid.uuid4().hex[:24]}" for _ in calls])
                message["content"] = choice.message["content"] or None
                finish = "tool_calls"
            logprobs = chat_logprobs(texts, c.token_ids, c.logprobs, c.top_logprobs) if req.logprobs else None
            wire.append({"index": i, "message": message, "logprobs": logprobs, "finish_reason": finish})
        return self._reply(
            reply_body("chatcmpl", "chat.completion", self.model_name, wire, prompt, completions, version)
        )

    async def _completions(self, request: web.Request) -> web.Response:
        return await self._answer(request, self._completion_prompt, self._completion_reply)

    def _completion_prompt(self, body: bytes, record: EpisodeRecord | None) -> tuple:
        req = parse_request(CompletionRequest, parse_json(body))
        prompt_in = req.prompt
        vocab = len(self.tokenizer)
        if isinstance(prompt_in, list) and not all(isinstance(t, int) and 0 <= t < vocab for t in prompt_in):
            raise ApiError(400, f"prompt: token ids must be in [0, {vocab})", "prompt")
        encode = lambda text: self.tokenizer(text, add_special_tokens=False).input_ids  # noqa: E731
        fresh = lambda text: self.tokenizer(text).input_ids  # noqa: E731  (a BOS where the tokenizer adds one)
        if record is None:
            prompt, parent = (list(prompt_in) if isinstance(prompt_in, list) else fresh(prompt_in)), None
        else:
            with self.records_lock:
                prompt, parent = record.completion_prompt(prompt_in, encode, fresh)
        room = record.room(parent, prompt) if record else UNBOUNDED
        sampling = self._sampling(req, record, room, len(prompt))
        return req, prompt_in, parent, prompt, sampling

    def _completion_reply(self, turn: tuple, record: EpisodeRecord | None, completions, version: int) -> web.Response:
        req, prompt_in, parent, prompt, sampling = turn
        choices, wire, texts = [], [], TokenTexts(self.tokenizer)
        for i, c in enumerate(completions):
            text, extra = before_stop(self.tokenizer.decode(c.token_ids, skip_special_tokens=True), sampling.stop)
            choices.append(
                Choice(list(c.token_ids), list(c.logprobs), c.finish_reason, version, text, None, extra=extra)
            )
            logprobs = None
            if req.logprobs is not None:
                logprobs = completion_logprobs(texts, c.token_ids, c.logprobs, c.top_logprobs)
            wire.append({"index": i, "text": text, "logprobs": logprobs, "finish_reason": c.finish_reason})
        if record is not None:
            text = prompt_in if isinstance(prompt_in, str) else None
            with self.records_lock:
                record.calls.append(Call(prompt, parent, "completion", choices, prompt_text=text))
        return self._reply(reply_body("cmpl", "text_completion", self.model_name, wire, prompt, completions, version))

    def _reply(self, body: dict) -> web.Response:
        """The reply, with the weight version that generated it: a body field (the openai client
        keeps unknown fields: `reply.weight_version`) and the x-relay-weight-version header."""
        with self.records_lock:
            self.requests += 1
        return web.json_response(body, headers={WEIGHT_VERSION_HEADER: str(body["weight_version"])})
