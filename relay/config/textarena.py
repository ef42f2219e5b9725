"""task.name=textarena: which of textarena's games the episodes play (relay/envs/textarena.py), and
the checks that refuse a game relay cannot run here in one line, before any actor starts.

    task: {name: textarena, env_id: GuessTheNumber-v0, env_args: {max_turns: 8}}
    task: {name: textarena, env_id: TicTacToe-v0, opponent: random}    # a two-player game
    task: {name: textarena, env_id: TicTacToe-v0, opponent: frozen_policy, opponent_temperature: 0}

The game runs as an ordinary environment: loading fills task.env (TextArenaEnv) and task.env_config
({env_id, env_args[, opponent[, opponent_model]]}) from these keys, so the EnvPool, the agent loop and
the reward are the ones a user's own environment gets. opponent_model is what the EnvPool needs to
load and run the frozen policy (model.path and its tokenizer, the temperature, a move's tokens and stops),
refilled from model.* and rollout.* on every load: a resolved config.yaml loaded with another
model.path plays against that model.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE_PIN = "textarena==0.7.4"
INSTALL = f"pip install '{PACKAGE_PIN}' (or pip install -e '.[tasks]')"
ENV_PATH = "relay.envs.textarena:TextArenaEnv"
# Games that ask a hosted LLM (a game master or a jury through OpenRouter) need the network and a key.
_ONLINE = re.compile(r"OpenRouter")
# task.opponent for two-player games. textarena ships no scripted policy (its agents are hosted-LLM
# clients, a console for a human and a local HF model), so relay's one is the weakest fair player:
# random, a move drawn from those the game lists to it (relay/envs/textarena.py random_move);
# frozen_policy is the run's starting model, never updated (relay/envs/textarena_opponent.py).
FROZEN_POLICY = "frozen_policy"
OPPONENTS = ("random", FROZEN_POLICY)
_NLTK_DOWNLOAD = re.compile(r"nltk\.download\(\s*(\[[^\]]*\]|['\"][^'\"]+['\"])")


@dataclass(frozen=True)
class TextArenaFields:
    """TaskConfig's fields for task.name=textarena."""

    env_id: str | None = None  # a registered game id, e.g. GuessTheNumber-v0
    env_args: dict[str, Any] = field(default_factory=dict)  # the game's constructor arguments, e.g. {max_turns: 8}
    opponent: str | None = None  # two-player games: who plays the other seat (OPPONENTS)
    # opponent=frozen_policy: its sampling temperature (0: greedy); null: rollout.temperature, as the policy samples
    opponent_temperature: float | None = None


def game_config(task) -> dict[str, Any]:
    opponent = {"opponent": task.opponent} if task.opponent is not None else {}
    return {"env_id": task.env_id, "env_args": dict(task.env_args), **opponent}


def opponent_model(task, model, rollout) -> dict[str, Any]:
    """opponent=frozen_policy: the model the EnvPool loads (model.path as the config names it; the
    EnvPool resolves it as the driver does) and how it samples; {} for any other opponent."""
    if task.opponent != FROZEN_POLICY or model is None or rollout is None:
        return {}
    temperature = rollout.temperature if task.opponent_temperature is None else task.opponent_temperature
    return {
        "opponent_model": {
            "path": model.path,
            "tokenizer_path": model.tokenizer_path,
            "trust_remote_code": model.trust_remote_code,
            "temperature": temperature,
            "max_tokens": rollout.max_tokens_per_turn or rollout.max_new_tokens,  # a move is one turn
            "stop": list(rollout.stop),  # a move ends where the policy's turns end
        }
    }


def own_config(env_config: dict) -> dict[str, Any]:
    """task.env_config without what loading derives from model.* and rollout.*."""
    return {k: v for k, v in env_config.items() if k != "opponent_model"}


def with_game_env(task, model=None, rollout=None):
    """task.name=textarena: task.env and task.env_config filled in (when the user left them alone;
    a resolved config.yaml already holds the same values). Anything else is named by validate."""
    own = own_config(task.env_config)
    if task.name != "textarena" or task.env not in (None, ENV_PATH) or own not in ({}, game_config(task)):
        return task
    env_config = {**game_config(task), **opponent_model(task, model, rollout)}
    return dataclasses.replace(task, env=ENV_PATH, env_config=env_config)


def validate_textarena(task) -> list[str]:
    if task.name != "textarena":
        given = [
            k for k in ("env_id", "env_args", "opponent", "opponent_temperature") if getattr(task, k) not in (None, {})
        ]
        return [f"task.{k}: only task.name=textarena reads it, not {task.name!r}" for k in given]
    if task.env != ENV_PATH:
        return ["task.env: task.name=textarena runs its game itself; leave task.env out (or use task.name=custom)"]
    if own_config(task.env_config) != game_config(task):
        return ["task.env_config: task.name=textarena takes the game's arguments in task.env_args"]
    if not task.env_id:
        return ["task.env_id: task.name=textarena needs a game id, e.g. task.env_id=GuessTheNumber-v0"]
    try:
        from textarena.envs.registration import ENV_REGISTRY
    except ImportError:
        return [f"task.name: textarena needs the textarena package: {INSTALL}"]
    problem = check_game(ENV_REGISTRY, task.env_id, task.env_args, task.opponent)
    return ([problem] if problem else []) + check_opponent_temperature(task)


def check_opponent_temperature(task) -> list[str]:
    t = task.opponent_temperature
    if t is None:
        return []
    if task.opponent != FROZEN_POLICY:
        return [f"task.opponent_temperature: only task.opponent={FROZEN_POLICY} samples; {task.opponent!r} does not"]
    if not 0 <= t < float("inf"):
        return [f"task.opponent_temperature: must be a finite number >= 0 (0: greedy), got {t}"]
    return []


def check_game(registry: dict, env_id: str, args: Any, opponent: str | None = None) -> str | None:
    """One line for a game relay cannot play here, or None: an unknown id (the closest ones),
    arguments the game does not take, data it would download, more than two players, or a
    two-player game without an opponent (or a single-player one with one)."""
    if env_id not in registry:
        close = difflib.get_close_matches(str(env_id), registry, n=3, cutoff=0.5)
        hint = (
            f"closest: {', '.join(close)}" if close else f"{len(registry)} in textarena.envs.registration.ENV_REGISTRY"
        )
        return f"task.env_id: {env_id!r} is not a textarena game ({hint})"
    if not isinstance(args, dict):
        return f"task.env_args: expected a mapping of {env_id}'s arguments, got {args!r}"
    spec = registry[env_id]
    if online := asks_online(spec.entry_point):
        return f"task.env_id: {env_id} asks {online} during the game; relay runs offline"
    if missing := missing_downloads(spec.entry_point):
        return f"task.env_id: {env_id} needs {missing}, which it downloads at run time; relay runs offline"
    players = player_count(spec.entry_point)
    if players > 2:
        return f"task.env_id: {env_id} is a game for more than two players; relay plays one- and two-player games"
    if opponent is not None and opponent not in OPPONENTS:
        return f"task.opponent: {opponent!r} is not an opponent relay has (choose from: {', '.join(OPPONENTS)})"
    if players == 2 and opponent is None:
        return (
            f"task.opponent: {env_id} is a two-player game: name who plays the other seat, "
            f"task.opponent=random (a move drawn from those the game lists) or task.opponent={FROZEN_POLICY} "
            f"(the starting model, frozen)"
        )
    if players == 1 and opponent is not None:
        return f"task.opponent: {env_id} is a single-player game; leave task.opponent out"
    try:
        cls = game_class(spec.entry_point)
    except ImportError as e:  # a game written for a package textarena does not install (gym, ...)
        missing = getattr(e, "name", None) or str(e)
        if missing.startswith("textarena."):
            return f"task.env_id: {env_id}'s module {missing} is not in the installed textarena package"
        return f"task.env_id: {env_id} needs the package {missing}, which is not installed"
    except SyntaxError as e:  # some games' source needs a newer Python (f-string quoting of 3.12)
        return f"task.env_id: {env_id}'s source does not compile on this Python ({e.msg}, {Path(e.filename or '').name}:{e.lineno})"
    takes = [name for name in inspect.signature(cls.__init__).parameters if name != "self"]
    if unknown := [a for a in args if a not in takes]:
        return f"task.env_args: {env_id} takes no argument {unknown[0]!r} (it takes: {', '.join(takes) or 'none'})"
    return trial_reset(spec, env_id, args, players)


def game_class(entry_point):
    if not isinstance(entry_point, str):
        return entry_point
    import importlib

    module, _, name = entry_point.partition(":")
    return getattr(importlib.import_module(module), name)


def game_sources(entry_point) -> list[str]:
    """The source of a game's own package (textarena/envs/<Game>/), read without importing it:
    importing some games downloads data."""
    if not isinstance(entry_point, str):
        return []
    import textarena

    root = Path(textarena.__file__).parent
    module = entry_point.partition(":")[0].split(".")
    folder = root.joinpath(*module[1:-1])  # the game's own package: textarena/envs/<Game>/
    sources = [p.read_text(errors="replace") for p in sorted(folder.rglob("*.py"))]
    shared = root / "envs" / "utils" / "word_lists.py"  # games that import it fetch nltk's word list
    if any("word_lists" in s for s in sources) and shared.exists():
        sources.append(shared.read_text(errors="replace"))
    return sources


def asks_online(entry_point) -> str | None:
    return (
        "a hosted LLM (OpenRouter, over the network)"
        if any(_ONLINE.search(s) for s in game_sources(entry_point))
        else None
    )


def player_count(entry_point) -> int:
    """1 or 2 by the state class a game keeps (SinglePlayerState, TwoPlayerState), else 3 (more)."""
    sources = game_sources(entry_point)  # none: a class given as is, or a module to be imported (its error)
    if not sources or any("SinglePlayerState" in s for s in sources):
        return 1
    return 2 if any("TwoPlayerState" in s for s in sources) else 3


def missing_downloads(entry_point) -> str | None:
    """The nltk data a game's modules fetch with nltk.download() (on import, which needs the
    network) and that is not here; None when it needs none."""
    sources = game_sources(entry_point)
    wanted = sorted(
        {n for s in sources for m in _NLTK_DOWNLOAD.findall(s) for n in re.findall(r"['\"]([^'\"]+)['\"]", m)}
    )
    missing = [name for name in wanted if not nltk_has(name)]
    return f"nltk data {', '.join(missing)}" if missing else None


def nltk_has(name: str) -> bool:
    """Whether nltk's data folders hold `name` (corpora/words, taggers/..., as a folder or a zip)."""
    try:
        import nltk
    except ImportError:
        return False
    for base in nltk.data.path:
        for kind in Path(base).glob("*"):
            if (kind / name).exists() or (kind / f"{name}.zip").exists():
                return True
    return False


def trial_reset(spec, env_id: str, args: dict, players: int = 1) -> str | None:
    """Start one game as the episodes will: the game's own check of its arguments,
    in one line. The game seeds Python's global RNG on reset: the driver's is put back as it was."""
    state = random.getstate()
    try:
        env = game_class(spec.entry_point)(**{**spec.kwargs, **args})
        env.reset(num_players=players, seed=0)
    except Exception as e:  # the package's own message, on one line
        return f"task.env_args: {env_id}: {' '.join(str(e).split()) or type(e).__name__}"
    finally:
        random.setstate(state)
    return None
