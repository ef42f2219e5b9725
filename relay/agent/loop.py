"""The agent loop: every rollout's episodes, token-in, token-out, and the one maker of Samples.

    loop = AgentLoop(engine, tokenizer, AgentLimits(max_turns=4), parser=get_parser("tag"),
                     run_tools=executor.run_batch)                 # and/or env_reset/env_step/env_close
    samples = loop.run(rows, SamplingParams(temperature=1.0, seed=0), n=8)

A single-turn rollout is this loop with no parser and no environment: one generate call, one
model turn per episode, ended by "stop" or "length". Single-turn, tool and environment episodes
so become Samples in one place (AgentLoop._sample), with the same fields for reward functions.

Every live episode advances one turn per iteration, and each iteration makes ONE batched
`engine.generate` call for all of them (prompt = that episode's token ids so far); `stream` hands
out each group as it ends and starts waiting rows in its place. A new turn is then, in this order:
  1. cut to the episode's token budget ("budget"), or, if the engine hit the per-turn limit, the
     episode's last turn ("length"; "budget" when what was left of the budget was the tighter one);
  2. parsed for tool calls (when a parser is given). Calls of the whole batch run together through
     `run_tools(calls) -> results` (parallel: a ToolExecutor pool, the tool server, or a thread
     pool). A malformed call is not run: its error is the observation the model reads next turn;
  3. else, with an environment, the turn's text is the action: `env_step` for the whole batch.
     An environment that raised ends its episode ("env_error", the error in meta);
  4. else the episode is done ("stop"). Done too: the environment said done ("stop"), or the turn
     or tool-turn limit leaves no turn to read the observation with ("max_turns").
The observation (tool results, error lines, the environment's text) is appended as tokens with
loss mask 0 and the loop goes on.

Token-in, token-out (the Sample holds exactly the ids the engine produced and saw; nothing
earlier is ever re-tokenized): observation tokens are the ids of only the text the chat template
writes after the model's turn (relay/envs/chat.py, ChatFormat). Parsers whose results continue the
model's own message (tag, react: result_role None) append their result text as is, unless the
model had already ended its message with EOS; then the result goes in a "tool" message through
the template. Decoding prompt + response gives exactly the template's rendering of the
conversation (tests/unit/test_agent_loop.py checks this on two templates).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from relay.agent.episode import Episode as _Episode
from relay.agent.episode import capped_calls, round_robin, tool_reply
from relay.agent.limits import AgentLimits
from relay.engines.base import Completion, Engine, SamplingParams
from relay.envs.base import ResetResult, StepResult
from relay.envs.chat import ChatFormat
from relay.envs.data import row_messages
from relay.failures import print_failure
from relay.tools.calls import ParseResult, ToolCall, ToolParser
from relay.tools.registry import ToolResult
from relay.types import FinishReason, Sample

# ------------------------------------------------------------------------------ the loop


class AgentLoop:
    def __init__(
        self,
        engine: Engine,
        tokenizer,
        limits: AgentLimits,
        *,
        parser: ToolParser | None = None,
        run_tools: Callable[[list[ToolCall]], list[ToolResult]] | None = None,
        env_reset: Callable[[list[str], list[dict]], list[ResetResult]] | None = None,
        env_step: Callable[[list[str], list[str]], list[StepResult]] | None = None,
        env_close: Callable[[list[str]], None] | None = None,
        tool_schemas: list[dict] | None = None,
        system_prompt: str | None = None,
        prompt_format: str = "chat",  # task.prompt_format: chat | raw | auto (relay/envs/chat.py)
        partial_chunk: int = 0,  # rollout.partial: new tokens per generate between two pauses (0: whole turns)
        pause: Callable[[], None] | None = None,  # run between turns (and chunks): may load new weights
    ):
        if parser is not None and run_tools is None:
            raise ValueError("a tool parser needs run_tools")
        if (env_reset is None) != (env_step is None):
            raise ValueError("env_reset and env_step come together")
        self.engine, self.tokenizer, self.limits = engine, tokenizer, limits
        self.parser, self.run_tools = parser, run_tools
        self.env_reset, self.env_step, self.env_close = env_reset, env_step, env_close
        self.system_prompt, self.partial_chunk, self.pause = system_prompt, partial_chunk, pause
        self.parser_failures = 0  # parse calls that raised (see _parse)
        self.format = ChatFormat(tokenizer, tool_schemas, prompt_format)
        if parser is not None or env_step is not None:
            if self.format.prompt_format == "raw":
                raise ValueError(
                    "task.prompt_format: raw prompts have no chat template to place tool results and "
                    "observations in; multi-turn episodes (tools, task.env) need a tokenizer with one"
                )
            _ = self.format.turn_end  # a template that cannot place observations fails here, not mid-rollout

    # -- public

    def run(
        self,
        rows: list[dict[str, Any]],
        sampling: SamplingParams,
        *,
        n: int | None = None,
        first_group_id: int = 0,
        episode_prefix: str = "ep",
        max_live: int = 0,
    ) -> list[Sample]:
        """n episodes per row (default sampling.n), in row order; one Sample per episode."""
        kwargs = dict(n=n, first_group_id=first_group_id, episode_prefix=episode_prefix, max_live=max_live)
        samples = [s for group in self.stream(rows, sampling, **kwargs) for s in group]
        return sorted(samples, key=lambda s: s.group_id)  # stable: each group's episodes stay in order

    def stream(
        self,
        rows: list[dict[str, Any]],
        sampling: SamplingParams,
        *,
        n: int | None = None,
        first_group_id: int = 0,
        episode_prefix: str = "ep",
        max_live: int = 0,
    ) -> Iterator[list[Sample]]:
        """Each row's group (its n Samples) as soon as its last episode ends: continuous batching.
        At most `max_live` episodes run at once (0: all); as a group ends, the next
        rows' episodes join the next generate call, so the engine stays full instead of waiting
        for a batch's slowest episode. max_live 0: the generate calls of one batch, turn by turn."""
        n = sampling.n if n is None else n
        pending = deque(enumerate(rows))
        live: list[_Episode] = []
        stop = tuple(dict.fromkeys((*sampling.stop, *(self.parser.stop_strings if self.parser else ()))))
        call, budget = 0, self.limits.max_total_tokens
        while pending or live:
            joining = []  # rows start while there is room (always one group, when nothing runs)
            while pending and (not max_live or not live + joining or len(live) + len(joining) + n <= max_live):
                i, row = pending.popleft()
                joining += [
                    _Episode(f"{episode_prefix}-{i}-{k}", row, first_group_id + i, budget, k, n) for k in range(n)
                ]
            if joining:
                self._start(joining)
                live += joining
            if active := [e for e in live if e.finish is None]:
                if self.pause is not None:
                    self.pause()
                self._turn(active, sampling, stop, call)
                call += 1
            done = {e.group_id for e in live} - {e.group_id for e in live if e.finish is None}
            for group_id in sorted(done):
                episodes = [e for e in live if e.group_id == group_id]
                live = [e for e in live if e.group_id != group_id]
                if self.env_close is not None:  # episodes the loop ended (limits) hand their environments back
                    self.env_close([e.id for e in episodes])
                yield [self._sample(e) for e in episodes]

    # -- steps

    def _turn(self, live: list[_Episode], sampling: SamplingParams, stop: tuple[str, ...], call: int) -> None:
        """One batched generate for every live episode (each on its own next turn), then their tools and env steps."""
        params = replace(
            sampling,
            n=1,
            stop=stop,
            max_tokens=min(self.limits.max_tokens_per_turn, max(e.room for e in live)),
            # a different draw each call, still reproducible from the rollout's seed
            seed=None if sampling.seed is None else (sampling.seed + 100_003 * call) % 2**31,
        )
        stop_ids = {self.tokenizer.eos_token_id, *params.stop_token_ids}
        prompts = [e.prompt_ids + e.response_ids for e in live]
        if self.partial_chunk:  # pauses inside the turn too: its tokens may come from several versions
            completions = self.engine.generate(prompts, params, chunk=self.partial_chunk, between=self.pause)
        else:
            completions = self.engine.generate(prompts, params)
        if len(completions) != len(live):
            raise RuntimeError(f"engine returned {len(completions)} completion groups for {len(live)} prompts")
        for e, group in zip(live, completions):
            self._model_turn(e, group[0], stop_ids)
        self._tools([e for e in live if e.finish is None and (e.calls or e.parse_errors)])
        self._env([e for e in live if e.finish is None and e.action is not None])

    def _start(self, episodes: list[_Episode]) -> None:
        if self.env_reset is None:
            by_row: dict[int, tuple[list[dict], list[int]]] = {}  # the n episodes of a row share its prompt
            for e in episodes:
                if e.group_id not in by_row:
                    messages = row_messages(e.row, self.system_prompt)
                    by_row[e.group_id] = messages, self.format.prompt_ids(messages)
                e.messages, e.prompt_ids = by_row[e.group_id]
            return
        results = self.env_reset([e.id for e in episodes], [e.row for e in episodes])
        if len(results) != len(episodes):
            raise RuntimeError(f"env_reset returned {len(results)} results for {len(episodes)} episodes")
        for e, r in zip(episodes, results):
            system = r.prompt_prefix or self.system_prompt
            messages = ([{"role": "system", "content": system}] if system else []) + [
                {"role": "user", "content": r.observation}
            ]
            e.messages, e.prompt_ids = messages, self.format.prompt_ids(messages)
            e.env_first_observation = r.observation
            if r.error is not None:
                e.finish, e.env_error = FinishReason.ENV_ERROR, r.error

    def _model_turn(self, e: _Episode, c: Completion, stop_ids: set[int]) -> None:
        e.calls, e.parse_errors, e.action, e.eos_token = [], [], None, None
        tokens, logprobs = list(c.token_ids), list(c.logprobs)
        versions = list(c.versions) if c.versions is not None else [self.engine.weight_version] * len(tokens)
        room = e.room
        over_budget = len(tokens) > room
        if over_budget:  # a prefix of a sample is a sample: its tokens and logprobs stay exact
            tokens, logprobs, versions = tokens[:room], logprobs[:room], versions[:room]
        start = len(e.response_ids)
        e.response_ids += tokens
        e.logprobs += logprobs
        e.versions += versions
        e.mask += [1] * len(tokens)
        e.spans.append((start, len(e.response_ids)))
        if tokens and tokens[-1] in stop_ids and not over_budget:
            e.eos_token = tokens[-1]
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        e.turn_texts.append(text)
        if over_budget:
            e.finish = FinishReason.BUDGET
        elif c.finish_reason == "length":  # the per-turn limit, or what was left of the budget, cut it
            # "budget" when the budget cut the turn shorter than the per-turn limit would have (a
            # single-turn rollout, whose budget is one turn, ends with "length")
            cut_by_budget = len(tokens) >= room and room < self.limits.max_tokens_per_turn
            e.finish = FinishReason.BUDGET if cut_by_budget else FinishReason.LENGTH
        elif self.parser is not None and (parsed := self._parse(self._parse_text(tokens, text))):
            if e.tool_turns >= self.limits.max_tool_turns or e.turns >= self.limits.max_turns:
                e.finish = FinishReason.MAX_TURNS  # no turn left to read the results with: do not run them
            else:
                e.tool_turns += 1
                e.calls, e.parse_errors = capped_calls(parsed.calls, parsed.errors, self.limits.max_calls_per_turn)
        elif self.env_step is not None:
            e.action = text
        else:
            e.finish = FinishReason.STOP

    def _parse_text(self, tokens: list[int], text: str) -> str:
        """What the parser reads: the turn's text, with its special tokens where the format marks calls with them."""
        return self.tokenizer.decode(tokens) if getattr(self.parser, "reads_special_tokens", False) else text

    def _parse(self, text: str) -> ParseResult:
        """The parser's calls and errors. A parser that raised (hostile text met a bug in it) costs the
        turn, not the rollout: the model reads one error line, and the failure is printed (rate-limited)."""
        try:
            return self.parser.parse(text)
        except Exception as e:
            self.parser_failures += 1
            where = f"tool parser {self.parser.name!r} raised {type(e).__name__} on a turn of {len(text)} characters"
            print_failure(
                self.parser_failures, f"relay: {where}: {e}", f"relay: {self.parser_failures} parser failures so far"
            )
            return ParseResult(
                errors=[f"the tool call could not be read ({type(e).__name__}); write it again, simpler"]
            )

    def _tools(self, episodes: list[_Episode]) -> None:
        order = round_robin([len(e.calls) for e in episodes])  # (episode, call) pairs, fairly interleaved
        results = self.run_tools([episodes[i].calls[j] for i, j in order]) if order else []
        if len(results) != len(order):
            raise RuntimeError(f"run_tools returned {len(results)} results for {len(order)} calls")
        result_of = dict(zip(order, results))
        for i, e in enumerate(episodes):
            texts: list[tuple[ToolCall, str]] = []  # what each call returned
            shown: list[tuple[ToolCall, str]] = []  # what the model reads: a reply may be nudged
            for j, call in enumerate(e.calls):
                res = result_of[i, j]
                e.tool_calls.append(
                    {
                        "name": call.name,
                        "arguments": call.arguments,
                        "ok": res.ok,
                        "error": res.error,
                        "seconds": res.seconds,
                        "turn": e.turns,
                    }
                )
                texts.append((call, res.observation()))
                shown.append((call, tool_reply(e, call.name, res.ok, texts[-1][1])))
            for err in e.parse_errors:
                e.tool_calls.append(
                    {"name": None, "arguments": None, "ok": False, "error": err, "seconds": 0.0, "turn": e.turns}
                )
                texts.append((ToolCall("", {}, ""), f"Error: {err}"))
                shown.append(texts[-1])
            bare = self._results_observation(e, texts) if shown != texts else None
            self._observe(e, self._results_observation(e, shown), bare)

    def _results_observation(self, e: _Episode, texts: list[tuple[ToolCall, str]]) -> str | list[dict]:
        role = self.parser.result_role
        if role is None and e.eos_token is None:
            return "".join(self.parser.format_result(c, t) for c, t in texts)
        # a "tool" turn (hermes, json, ...) or the model already closed its message
        return [{"role": role or "tool", "name": c.name, "content": self.parser.format_result(c, t)} for c, t in texts]

    def _env(self, episodes: list[_Episode]) -> None:
        if not episodes:
            return
        results = self.env_step([e.id for e in episodes], [e.action for e in episodes])
        if len(results) != len(episodes):
            raise RuntimeError(f"env_step returned {len(results)} results for {len(episodes)} actions")
        for e, r in zip(episodes, results):
            if r.error is not None:
                e.finish, e.env_error = FinishReason.ENV_ERROR, r.error
                continue
            # the reward of this step credits the model turn that took it (its last token)
            at = e.spans[-1][1] - 1 if e.spans[-1][1] > e.spans[-1][0] else max(len(e.response_ids) - 1, 0)
            e.token_rewards[at] = e.token_rewards.get(at, 0.0) + r.reward
            e.env_actions.append(e.action)
            e.env_observations.append(r.observation)
            e.env_rewards.append(r.reward)
            e.env_dones.append(r.done)
            e.env_infos.append(r.info)
            # calls the environment ran itself count with the loop's own (agent/tool_calls, tool_errors)
            e.tool_calls += [{**c, "turn": e.turns} for c in r.info.get("tool_calls", ())]
            if r.done:
                e.finish = FinishReason.STOP
            elif e.turns >= self.limits.max_turns:
                e.finish = FinishReason.MAX_TURNS
            else:  # text is the user's next message; a list of messages ("tool" results) goes in as it is
                user = isinstance(r.observation, str)
                self._observe(e, [{"role": "user", "content": r.observation}] if user else r.observation)

    def _observe(self, e: _Episode, observation: str | list[dict], bare: str | list[dict] | None = None) -> None:
        """Append an observation's tokens. `bare`: the observation without its nudge, whose tokens
        the Sample trains on in its place (Episode.swap_in_bare_replies)."""
        ids = self.format.observation_ids(observation, e.eos_token)
        if len(ids) >= e.room:  # no room left for a model token after it
            e.finish = FinishReason.BUDGET
            return
        if bare is not None:
            e.swaps.append((len(e.response_ids), len(ids), self.format.observation_ids(bare, e.eos_token)))
        e.response_ids += ids
        e.logprobs += [0.0] * len(ids)
        e.versions += [e.versions[-1] if e.versions else self.engine.weight_version] * len(ids)
        e.mask += [0] * len(ids)

    def _sample(self, e: _Episode) -> Sample:
        """The one place Samples are made: single-turn, tool and environment episodes alike."""
        e.swap_in_bare_replies()
        tool_errors = sum(not c["ok"] for c in e.tool_calls)
        meta = {
            "episode_id": e.id,
            "messages": e.messages,
            "agent": {
                "turns": e.turns,
                "tool_calls": sum(c["name"] is not None for c in e.tool_calls),
                "tool_errors": tool_errors,
                "tool_seconds": sum(c["seconds"] for c in e.tool_calls),
                "env_steps": len(e.env_rewards),
            },
        }
        if self.env_step is not None:
            meta["env"] = {
                "first_observation": e.env_first_observation,
                "actions": e.env_actions,
                "observations": e.env_observations,
                "rewards": e.env_rewards,
                "dones": e.env_dones,
                "infos": e.env_infos,
                "error": e.env_error,
            }
        return Sample(
            prompt_ids=e.prompt_ids,
            response_ids=e.response_ids,
            rollout_logprobs=e.logprobs,
            loss_mask=e.mask,
            group_id=e.group_id,
            weight_version=min(e.versions, default=self.engine.weight_version),
            token_versions=e.versions,
            finish_reason=e.finish,
            turn_spans=e.spans,
            tool_calls=e.tool_calls,
            token_rewards=e.token_rewards,
            ground_truth=e.row.get("ground_truth"),
            response_text=self.tokenizer.decode(e.response_ids, skip_special_tokens=True),
            final_text=e.turn_texts[-1] if e.turn_texts else "",
            turn_texts=e.turn_texts,
            meta=meta,
        )
