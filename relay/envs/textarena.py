"""task.name=textarena: a textarena game played as a relay environment (`pip install 'relay[tasks]'`;
settings and checks in relay/config/textarena.py).

    task: {name: textarena, env_id: GuessTheNumber-v0}
    system: You are playing a text game. ...
    user:   You are Player 0. You are playing Guess The Number. ... Enter your guess.
    model:  [10]           -> "The target number is higher."
    model:  [15]           -> game over, reward 1 (the game's outcome)

The game. TextArenaEnv follows the BaseEnvironment contract (reset, step, get_state_description,
get_prompt_prefix), so it runs in the EnvPool like a user's environment: multi-turn, each model turn
is one move, token-in token-out. It builds the registered game's class with the registry's
arguments and task.env_args; of textarena's wrappers only the action formatting of the id's default
version is kept (a move without brackets is put in brackets): relay's chat keeps the history, so
each observation is only what the game said since the last move (its prompt first, then its
messages, boards and warnings), not the whole history again as textarena's observation wrappers do.

Reward. The game's outcome, on the move that ends the game (the episode's return): 1 for a win;
some games give partial credit (GuessTheNumber: how close the last guess was); losing by invalid
moves gives what the game's rules say. Held-out accuracy counts wins (reward >= task.success_threshold,
1.0 by default). An episode that relay's limits cut (rollout.max_turns, max_total_tokens) before the
game ends returns 0: set rollout.max_turns to at least the game's own turn limit.

Invalid moves. As the game's rules say: textarena warns the player and lets it retry once
(its error allowance), and a second invalid move in a row ends the game. Each invalid move is marked
in the step's info; env/invalid_moves (per episode) and env/invalid_endings (share of episodes a
game ended for an invalid move) count them, eval/... the same for held-out episodes.

Two-player games (task.opponent). The model takes seat seed % 2; the other seat's moves are made
here, between the model's, and reach the model in its next observation ("Opponent's move: [4]",
then what the game said). The reward is the model's seat's outcome. task.opponent=random draws a
listed move (random_move); task.opponent=frozen_policy asks the run's starting model, frozen
(relay/envs/textarena_opponent.py). The opponent's invalid moves are the game's to judge, as the
model's are, and counted apart: env/opponent_invalid_moves (per episode) and
env/opponent_invalid_endings (share of games the opponent lost by them). A game the opponent
loses by invalid moves before the model's first move ends on the model's first move, whatever it is.

Seeds. A game's setup is drawn from its seed (textarena seeds Python's RNG on reset), shared by a
GRPO group. Training games use seeds in [0, 2**30), held-out games distinct seeds in [2**30, 2**31),
which training never uses. A game with a small setup space (GuessTheNumber: 20 targets) still plays
held-out setups that training also saw under other seeds.
"""

from __future__ import annotations

import numbers
import random
import re
import statistics
from typing import Any

from relay.config.textarena import game_class
from relay.envs.textarena_opponent import FROZEN_POLICY, frozen_policy

PREFIX = (
    "You are playing a text game. Each reply is one move: follow the game's instructions and write "
    "the move the way the game asks, for example in square brackets."
)
HELD_OUT_FIRST_SEED = 2**30  # training seeds are below it, held-out seeds at or above it
MAX_OPPONENT_MOVES = 100  # per model move: a game that never hands the turn back is an environment error
_QUOTED_MOVE = re.compile(r"'(\[[^\]\n]+\])'")  # '[4]', '[0, 1]', '[check]'
_LISTS_MOVES = re.compile(r"available|valid", re.IGNORECASE)


class TextArenaEnv:
    """One textarena game per episode; the instance is reset for the next one. In a two-player
    game (config opponent) the model takes seat seed % 2 and the opponent plays the other."""

    def __init__(self, config):
        import textarena as ta
        from textarena.envs.registration import ENV_REGISTRY

        spec = ENV_REGISTRY[config["env_id"]]
        self.env_id = config["env_id"]
        self.game = game_class(spec.entry_point)(**{**spec.kwargs, **dict(config.get("env_args") or {})})
        self.bracket_actions = ta.wrappers.ActionFormattingWrapper in (spec.default_wrappers or [])
        self.opponent = config.get("opponent")
        self.opponent_model = dict(config.get("opponent_model") or {})  # frozen_policy: the model and its sampling
        self.shown = ""

    def reset(self, seed: int) -> str:
        players = 2 if self.opponent else 1
        self.game.reset(num_players=players, seed=seed)
        self.player = seed % players
        self.rng = random.Random(seed)  # the opponent's own draws, apart from the game's RNG
        self.opponent_seen: list[str] = []  # random: every line the game wrote to the opponent
        self.opponent_chat = [{"role": "system", "content": PREFIX}]  # frozen_policy: its side of the chat
        self.opponent_invalid = 0  # the opponent's invalid moves not yet reported in a step's info
        over = self._opponent_moves()  # the opponent opens when it holds seat 0
        self.shown = self._new_messages(self.player)
        if over:  # the opponent lost by invalid moves before the model's first move
            self.shown = "\n".join(m for m in (self.shown, reason_of(self.game.state.game_info, self.player)) if m)
        return self.shown

    def get_prompt_prefix(self) -> str:
        return PREFIX

    def get_state_description(self) -> str:
        return self.shown

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        done, invalid = bool(self.game.state.done), False  # done: the opponent lost before the first move
        if not done:
            done, _ = self.game.step(self._formatted(action))
            # a warned invalid move leaves the (seat-shared) error count up until a valid one resets it:
            # read it before the opponent moves
            invalid = self.game.state.error_count > 0
            done = done or self._opponent_moves()
        opponent = {"opponent_invalid_moves": self.opponent_invalid} if self.opponent else {}
        self.opponent_invalid = 0
        if not done:
            self.shown = self._new_messages(self.player)
            return self.shown, 0.0, False, {"invalid_move": invalid, **opponent}
        rewards, game_info = self.game.close()
        info = dict(game_info.get(self.player, {}))
        ended_invalid = bool(info.get("invalid_move"))
        if self.opponent:
            opponent["opponent_invalid_ending"] = bool(game_info.get(1 - self.player, {}).get("invalid_move"))
        reason = reason_of(game_info, self.player)
        self.shown = "\n".join(m for m in (self._new_messages(self.player), reason) if m)
        reward = (rewards or {}).get(self.player, 0.0)
        if not isinstance(reward, numbers.Real):  # ThreeCardMonte-v0 calls set_invalid_move(reward, reason)
            raise ValueError(
                f"{self.env_id}: the game's reward is {str(reward)[:80]!r}, not a number (a bug in the game)"
            )
        reward = float(reward)
        return (
            self.shown,
            reward,
            True,
            {"invalid_move": ended_invalid, "invalid_ending": ended_invalid, "reason": reason, **opponent},
        )

    def _formatted(self, action: str) -> str:
        if self.bracket_actions and "[" not in action and "]" not in action:
            return f"[{action}]"  # textarena's ActionFormattingWrapper, as the id's default version has it
        return action

    def _opponent_moves(self) -> bool:
        """The opponent's moves until the turn is the model's again; whether the game is over."""
        state = self.game.state
        for _ in range(MAX_OPPONENT_MOVES):
            if state.done or not self.opponent or state.current_player_id == self.player:
                return bool(state.done)
            seat = state.current_player_id
            done, _ = self.game.step(self._opponent_move(seat))
            # warned (the error count stays up while the seat retries), or lost by it
            self.opponent_invalid += state.error_count > 0 or bool(state.game_info[seat].get("invalid_move"))
            if done:
                return True
        raise RuntimeError(f"{self.env_id}: the opponent made {MAX_OPPONENT_MOVES} moves in a row")

    def _opponent_move(self, seat: int) -> str:
        if self.opponent != FROZEN_POLICY:
            self.opponent_seen += [text for _, text, _ in self._drain(seat)]
            return random_move(self.opponent_seen, self.rng)
        m = self.opponent_model
        policy = frozen_policy(m["path"], m.get("tokenizer_path"), bool(m.get("trust_remote_code")))
        self.opponent_chat.append({"role": "user", "content": self._new_messages(seat)})
        seed, stop = self.rng.randrange(2**63), tuple(m.get("stop") or ())
        text = policy.move(self.opponent_chat, float(m["temperature"]), int(m["max_tokens"]), seed, stop)
        self.opponent_chat.append({"role": "assistant", "content": text})
        return self._formatted(text)

    def _drain(self, player: int) -> list:
        messages = self.game.state.observations[player]
        self.game.state.observations[player] = []
        return messages

    def _new_messages(self, seat: int) -> str:
        """What the game said to a seat since its last move (the other seat's moves too); its own
        moves are in its chat already."""
        import textarena as ta

        lines = []
        for sender, text, kind in self._drain(seat):
            if kind == ta.ObservationType.PLAYER_ACTION:
                if sender == seat:
                    continue
                text = f"Opponent's move: {text}"
            lines.append(text.strip())
        return "\n".join(lines).strip()

    @staticmethod
    def make_rows(n: int, seed: int) -> list[dict[str, Any]]:
        rng = random.Random(seed)
        return [{"seed": rng.randrange(HELD_OUT_FIRST_SEED)} for _ in range(n)]

    @staticmethod
    def make_eval_rows(n: int, seed: int) -> list[dict[str, Any]]:
        """n distinct held-out games, from seeds training never draws."""
        seeds = random.Random(seed + 7_919).sample(range(HELD_OUT_FIRST_SEED, 2 * HELD_OUT_FIRST_SEED), n)
        return [{"seed": s} for s in seeds]


def reason_of(game_info: dict, player: int) -> str:
    return str((game_info.get(player) or {}).get("reason") or "The game is over.")


def random_move(seen: list[str], rng: random.Random) -> str:
    """task.opponent=random: a move drawn from the latest line the game wrote listing the available
    or valid moves ('[4]', '[0, 1]', '[check]'), else from every quoted move the game has shown
    (its rules' examples: '[rock]', '[paper]', '[scissors]'). One that turns out invalid is the
    game's to judge: warned, then lost, as for the model."""
    text = "\n".join(seen)
    for line in reversed(text.splitlines()):
        if _LISTS_MOVES.search(line) and (moves := _QUOTED_MOVE.findall(line)):
            return rng.choice(moves)
    moves = _QUOTED_MOVE.findall(text) or re.findall(r"\[[^\]\n]+\]", text)
    return rng.choice(moves) if moves else "[0]"


def game_rows(n_train: int, n_eval: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(training rows, held-out rows): one game seed each, the two seed ranges disjoint."""
    return TextArenaEnv.make_rows(n_train, seed), TextArenaEnv.make_eval_rows(n_eval, seed)


def invalid_move_metrics(samples, prefix: str, games: bool = True) -> dict[str, float]:
    """{prefix}invalid_moves: invalid moves per episode; {prefix}invalid_endings: the share of episodes
    a game ended for an invalid move (info["invalid_move"], info["invalid_ending"]); in two-player
    games the opponent's the same, apart: {prefix}opponent_invalid_moves, {prefix}opponent_invalid_endings.
    Nothing unless `games`; an episode the agent loop ended before any move counts as none."""
    if not games or not samples:
        return {}
    infos = [(s.meta.get("env") or {}).get("infos") or [] for s in samples]
    metrics = {
        f"{prefix}invalid_moves": statistics.fmean(sum(bool(info.get("invalid_move")) for info in i) for i in infos),
        f"{prefix}invalid_endings": statistics.fmean(any(info.get("invalid_ending") for info in i) for i in infos),
    }
    if any("opponent_invalid_moves" in info for i in infos for info in i):
        moves = statistics.fmean(sum(info.get("opponent_invalid_moves", 0) for info in i) for i in infos)
        endings = statistics.fmean(any(info.get("opponent_invalid_ending") for info in i) for i in infos)
        metrics |= {f"{prefix}opponent_invalid_moves": moves, f"{prefix}opponent_invalid_endings": endings}
    return metrics
