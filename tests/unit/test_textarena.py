"""task.name=textarena: a textarena game as a relay environment (the BaseEnvironment contract),
its outcome as the reward, invalid moves ending games as the rules say and counted, held-out games
from seeds training never draws, and each game relay cannot play here refused in one line."""

import random
import sys
from types import SimpleNamespace

import pytest

from relay.config import ConfigError, load_config, save_resolved
from relay.envs.base import EnvRunner
from relay.envs.contract import EnvMaker
from relay.envs.textarena import HELD_OUT_FIRST_SEED, PREFIX, TextArenaEnv, invalid_move_metrics, random_move
from relay.run.rows import task_rows

pytest.importorskip("textarena")

GUESS = ["task.name=textarena", "task.env_id=GuessTheNumber-v0"]


def problems(*overrides) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load_config(None, ["task.name=textarena", *overrides])
    return e.value.problems


def guess_game(seed: int) -> tuple[TextArenaEnv, int]:
    env = TextArenaEnv({"env_id": "GuessTheNumber-v0", "env_args": {}})
    env.reset(seed=seed)
    return env, env.game.state.game_state["game_number"]


def test_the_game_runs_as_the_environment_with_its_outcome_as_the_reward():
    cfg = load_config(None, [*GUESS, "task.env_args={max_turns: 5}"])
    assert cfg.task.env == "relay.envs.textarena:TextArenaEnv"
    assert cfg.task.env_config == {"env_id": "GuessTheNumber-v0", "env_args": {"max_turns": 5}}
    assert cfg.task.reward_fn_path == "relay.envs.base:episode_return"
    runner = EnvRunner(EnvMaker(TextArenaEnv, cfg.task.env_config))
    (start,) = runner.reset(["e0"], [{"seed": 3}])
    assert start.prompt_prefix == PREFIX and "Guess The Number" in start.observation and start.error is None
    target = runner.live["e0"].game.state.game_state["game_number"]
    wrong = 1 if target != 1 else 2
    (hint,) = runner.step(["e0"], [f"I guess [{wrong}]"])
    assert (hint.reward, hint.done, hint.info) == (0.0, False, {"invalid_move": False})
    assert hint.observation == "The target number is higher." and "Guess The Number" not in hint.observation
    (won,) = runner.step(["e0"], [str(target)])  # no brackets: the default version's action formatting adds them
    assert (won.reward, won.done, won.info["invalid_move"]) == (1.0, True, False)


def test_an_invalid_move_is_warned_then_ends_the_game_as_the_rules_say():
    env, _ = guess_game(seed=1)
    obs, reward, done, info = env.step("no idea")
    assert (reward, done, info) == (0.0, False, {"invalid_move": True}) and "invalid move" in obs
    obs, reward, done, info = env.step("still no idea")
    assert done and reward == 0.0 and info["invalid_move"] and info["invalid_ending"]
    assert info["reason"].startswith("Invalid Move")
    # counted: per episode, and the share of games an invalid move ended
    sample = lambda infos: SimpleNamespace(meta={"env": {"infos": infos}})  # noqa: E731
    ended = sample([{"invalid_move": True}, info])
    clean = sample([{"invalid_move": False}, {"invalid_move": False, "invalid_ending": False}])
    assert invalid_move_metrics([ended, clean], "env/") == {"env/invalid_moves": 1.0, "env/invalid_endings": 0.5}
    assert invalid_move_metrics([ended, clean], "env/", games=False) == {}  # only task.name=textarena has them


def test_a_game_whose_reward_is_not_a_number_fails_in_one_line():
    # ThreeCardMonte-v0 passes set_invalid_move its reward and reason swapped: the second invalid
    # move's reward is the reason's text, an environment error that says so
    env = TextArenaEnv({"env_id": "ThreeCardMonte-v0", "env_args": {}})
    env.reset(seed=0)
    assert env.step("no idea")[1:3] == (0.0, False)
    with pytest.raises(ValueError) as e:
        env.step("still no idea")
    assert (
        str(e.value)
        == "ThreeCardMonte-v0: the game's reward is 'Bad action. Use `[k]`.', not a number (a bug in the game)"
    )


def test_the_seed_sets_the_game_and_an_instance_serves_the_next_episode():
    env, first = guess_game(seed=11)
    targets = {guess_game(seed=s)[1] for s in range(40)}
    assert len(targets) > 5 and guess_game(seed=11)[1] == first
    env.step(f"[{first}]")
    env.reset(seed=11)  # reused for another episode: a fresh game
    assert env.game.state.game_state["game_number"] == first and not env.game.state.done


def test_held_out_games_use_seeds_training_never_draws():
    cfg = load_config(None, [*GUESS, "task.num_train_rows=2000", "task.num_eval_rows=64"])
    train, held_out = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    assert len(train) == 2000 and len(held_out) == 64
    assert all(r["seed"] < HELD_OUT_FIRST_SEED for r in train)
    assert all(r["seed"] >= HELD_OUT_FIRST_SEED for r in held_out) and len({r["seed"] for r in held_out}) == 64
    other = load_config(None, [*GUESS, "task.num_train_rows=2000", "task.num_eval_rows=64", "run.seed=1"])
    assert task_rows(other.task, other.tools, other.run.seed)[0] != train


def test_the_resolved_config_loads_again(tmp_path):
    cfg = load_config(None, [*GUESS, "task.env_args={max_turns: 5}"])
    save_resolved(cfg, tmp_path / "config.yaml")
    again = load_config(tmp_path / "config.yaml")
    fields = lambda t: (t.name, t.env_id, t.env_args, t.env, t.env_config)  # noqa: E731
    assert fields(again.task) == fields(cfg.task)


def test_bad_games_and_arguments_are_one_line_each():
    (p,) = problems("task.env_id=GuessTheNumbr-v0")
    assert p.startswith("task.env_id: 'GuessTheNumbr-v0' is not a textarena game (closest: GuessTheNumber-v0")
    (p,) = problems("task.env_id=GuessTheNumber-v0", "task.env_args={maxturns: 3}")
    assert (
        p
        == "task.env_args: GuessTheNumber-v0 takes no argument 'maxturns' (it takes: min_number, max_number, max_turns)"
    )
    (p,) = problems("task.env_id=GuessTheNumber-v0", "task.env_args={min_number: 9, max_number: 2}")
    assert p.startswith("task.env_args: GuessTheNumber-v0: ") and "\n" not in p
    (p,) = problems("task.env_id=TicTacToe-v0")
    assert p.startswith("task.opponent: TicTacToe-v0 is a two-player game: name who plays the other seat, task.opp")
    (p,) = problems("task.env_id=TicTacToe-v0", "task.opponent=minimax")
    assert p == "task.opponent: 'minimax' is not an opponent relay has (choose from: random, frozen_policy)"
    (p,) = problems("task.env_id=GuessTheNumber-v0", "task.opponent=random")
    assert p == "task.opponent: GuessTheNumber-v0 is a single-player game; leave task.opponent out"
    (p,) = problems("task.env_id=SecretMafia-v0", "task.opponent=random")
    assert p.startswith("task.env_id: SecretMafia-v0 is a game for more than two players")
    (p,) = problems("task.env_id=Debate-v0")
    assert (
        p
        == "task.env_id: Debate-v0 asks a hosted LLM (OpenRouter, over the network) during the game; relay runs offline"
    )
    assert problems() == ["task.env_id: task.name=textarena needs a game id, e.g. task.env_id=GuessTheNumber-v0"]
    (p,) = problems("task.env_id=GuessTheNumber-v0", "task.env=relay.envs.textgame:TextGameEnv")
    assert p.startswith("task.env: task.name=textarena runs its game itself")
    with pytest.raises(ConfigError, match="only task.name=textarena reads it"):
        load_config(None, ["task.env_id=GuessTheNumber-v0"])


def test_a_game_that_downloads_data_is_refused_before_it_is_imported(monkeypatch):
    import nltk

    monkeypatch.setattr(nltk.data, "path", [])  # no nltk data anywhere
    (p,) = problems("task.env_id=Hangman-v0")
    assert p == "task.env_id: Hangman-v0 needs nltk data words, which it downloads at run time; relay runs offline"
    assert "textarena.envs.Hangman.env" not in sys.modules  # importing it would have called nltk.download


def test_checking_a_game_leaves_the_drivers_rng_alone():
    random.seed(123)
    expected = random.random()
    random.seed(123)
    load_config(None, GUESS)  # the check resets one game, which seeds Python's RNG
    assert random.random() == expected


def test_a_missing_package_says_which_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "textarena.envs.registration", None)  # import fails as if not installed
    assert problems("task.env_id=GuessTheNumber-v0") == [
        "task.name: textarena needs the textarena package: pip install 'textarena==0.7.4' (or pip install -e '.[tasks]')"
    ]


def test_a_two_player_game_is_played_against_the_named_opponent():
    cfg = load_config(None, ["task.name=textarena", "task.env_id=TicTacToe-v0", "task.opponent=random"])
    assert cfg.task.env_config == {"env_id": "TicTacToe-v0", "env_args": {}, "opponent": "random"}
    seats, results = set(), []
    for seed in range(6):
        env = TextArenaEnv(cfg.task.env_config)
        obs = env.reset(seed=seed)
        seats.add(env.player)
        assert f"You are Player {env.player}" in obs and env.game.state.current_player_id == env.player
        assert ("Opponent's move" in obs) == (env.player == 1)  # seat 0 opens
        rng, done, moves = random.Random(seed), False, 0
        while not done:
            obs, reward, done, info = env.step(random_move([obs], rng))  # the listed moves: always valid
            moves += 1
            assert not info["invalid_move"] and (done or "Opponent's move" in obs)
        results.append(reward)  # the model's seat's outcome: 1 win, -1 loss, 0 draw
    assert seats == {0, 1} and set(results) <= {-1.0, 0.0, 1.0} and moves <= 5


def test_the_random_opponent_draws_from_the_moves_the_game_lists():
    rng = random.Random(0)
    seen = ["Rules: play '[3]' or '[9]'.", "Available Moves: '[0]', '[4]'\nOld: '[7]'"]
    assert {random_move(seen, rng) for _ in range(40)} == {"[0]", "[4]"}
    assert {random_move(["Respond with '[rock]', '[paper]' or '[scissors]'."], rng) for _ in range(40)} == {
        "[rock]",
        "[paper]",
        "[scissors]",
    }
