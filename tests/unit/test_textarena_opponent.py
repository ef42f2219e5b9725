"""task.opponent=frozen_policy: a two-player textarena game whose other seat is the run's starting
model, loaded once per process on the CPU and never updated; its invalid moves judged by the game's
rules and counted apart from the model's."""

import random
from types import SimpleNamespace

import pytest
import torch

from actors.env import with_model_folders
from relay.config import ConfigError, load_config, save_resolved
from relay.envs.base import EnvRunner
from relay.envs.contract import EnvMaker
from relay.envs.textarena import PREFIX, TextArenaEnv, invalid_move_metrics, random_move
from relay.envs.textarena_opponent import frozen_policy

pytest.importorskip("textarena")

FROZEN = ["task.name=textarena", "task.env_id=TicTacToe-v0", "task.opponent=frozen_policy"]


@pytest.fixture(autouse=True)
def torch_threads():
    """Loading the opponent keeps torch to one thread, as in its EnvPool; the rest of the tests get theirs back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def problems(*overrides) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load_config(None, ["task.name=textarena", *overrides])
    return e.value.problems


def play(env: TextArenaEnv, seed: int) -> tuple[float, list[dict]]:
    """One episode, the model's seat playing listed (always valid) moves; (its return, the step infos)."""
    obs, rng, done, infos = env.reset(seed=seed), random.Random(seed), False, []
    while not done:
        obs, reward, done, info = env.step(random_move([obs], rng))
        infos.append(info)
    return reward, infos


def as_in_the_pool(cfg) -> dict:
    """The env_config an EnvPool hands the game: the opponent's model.path as a folder."""
    return with_model_folders(cfg.task).env_config


def test_an_episode_against_the_starting_model_runs_to_the_end():
    cfg = load_config(None, [*FROZEN, "rollout.max_tokens_per_turn=8", "task.opponent_temperature=0"])
    assert cfg.task.env_config == {
        "env_id": "TicTacToe-v0",
        "env_args": {},
        "opponent": "frozen_policy",
        "opponent_model": {
            "path": "tiny",
            "tokenizer_path": None,
            "trust_remote_code": False,
            "temperature": 0,
            "max_tokens": 8,
            "stop": [],
        },
    }
    runner = EnvRunner(EnvMaker(TextArenaEnv, as_in_the_pool(cfg)))
    for seed in (0, 1):  # the model in seat 0, then in seat 1 (the opponent opens)
        (start,) = runner.reset([f"e{seed}"], [{"seed": seed}])
        assert start.error is None and start.prompt_prefix == PREFIX and "Tic Tac Toe" in start.observation
        rng, done, infos = random.Random(seed), False, []
        while not done:
            (result,) = runner.step([f"e{seed}"], [random_move([start.observation], rng)])
            assert result.error is None
            done, start = result.done, result
            infos.append(result.info)
        assert result.reward in (-1.0, 0.0, 1.0) and not any(i["invalid_move"] for i in infos)
        moves, ended = sum(i["opponent_invalid_moves"] for i in infos), infos[-1]["opponent_invalid_ending"]
        assert ended == (moves == 2 and result.reward == 1.0)  # the rules: a warning, then the game is lost
    # the opponent saw the game as the model does: the system prompt, then the game's turns
    env, _ = runner.finished("e1")
    chat = env.opponent_chat
    assert chat[0] == {"role": "system", "content": PREFIX} and "You are Player 0 in Tic Tac Toe" in chat[1]["content"]
    assert [m["role"] for m in chat[1:]] == ["user", "assistant"] * ((len(chat) - 1) // 2)


def test_the_opponent_is_loaded_once_and_keeps_its_weights_when_the_policys_change(tiny_model_path):
    from relay.envs import textarena_opponent
    from relay.models.loading import load_model

    textarena_opponent._load.cache_clear()  # a fresh process's first move
    opponent = frozen_policy(tiny_model_path)
    assert frozen_policy(tiny_model_path) is opponent  # one copy per process (per EnvPool actor)
    assert torch.get_num_threads() == 1 and not opponent.model.training
    assert not any(p.requires_grad for p in opponent.model.parameters())
    before = {k: v.clone() for k, v in opponent.model.state_dict().items()}
    policy = load_model(tiny_model_path)  # the learner's copy, from the same folder
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
    ids = torch.tensor([[5, 6, 7, 8]])
    policy(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    changed = [k for k, v in policy.state_dict().items() if not torch.equal(v, before[k])]
    assert changed  # the policy moved ...
    assert all(torch.equal(v, before[k]) for k, v in opponent.model.state_dict().items())  # ... the opponent did not
    own = {p.data_ptr() for p in opponent.model.parameters()}
    assert not own & {p.data_ptr() for p in policy.parameters()}


def test_a_sampling_opponent_replays_its_game_from_the_seed():
    cfg = load_config(None, [*FROZEN, "rollout.max_tokens_per_turn=6", "task.opponent_temperature=1.5"])
    assert cfg.task.env_config["opponent_model"]["temperature"] == 1.5
    games = []
    for _ in range(2):
        env = TextArenaEnv(as_in_the_pool(cfg))
        play(env, seed=4)
        games.append(env.opponent_chat)
    assert games[0] == games[1]


def test_a_move_ends_where_the_policys_turns_end():
    digits = [str(d) for d in range(10)]
    cfg = load_config(None, [*FROZEN, "rollout.max_tokens_per_turn=12", f"rollout.stop={digits}"])
    env = TextArenaEnv(as_in_the_pool(cfg))
    play(env, seed=0)
    moves = [m["content"] for m in env.opponent_chat if m["role"] == "assistant"]
    assert moves and all(m[-1] in digits and not any(c in digits for c in m[:-1]) for m in moves)


def test_the_opponents_moves_are_judged_by_the_rules_and_counted_apart(monkeypatch):
    class Scripted:
        """An invalid move, then the first move the game lists: warned once, then play goes on."""

        def __init__(self):
            self.seen = []

        def move(self, messages, temperature, max_tokens, seed, stop=()):
            self.seen.append([dict(m) for m in messages])
            return "no idea" if len(messages) == 2 else random_move([messages[-1]["content"]], random.Random(0))

    scripted = Scripted()
    monkeypatch.setattr("relay.envs.textarena.frozen_policy", lambda *a: scripted)
    cfg = load_config(None, FROZEN)
    reward, infos = play(TextArenaEnv(as_in_the_pool(cfg)), seed=1)  # the opponent holds seat 0 and opens
    assert reward in (-1.0, 0.0, 1.0) and len(scripted.seen) >= 3
    assert sum(i["opponent_invalid_moves"] for i in infos) == 1 and not infos[-1]["opponent_invalid_ending"]
    warned = scripted.seen[1][-1]["content"]
    assert warned.startswith("Player 0 attempted an invalid move")  # told, as the model would be
    assert "Opponent's move: [" in scripted.seen[2][-1]["content"]  # the model's moves, as the other side's
    samples = [SimpleNamespace(meta={"env": {"infos": infos}})]
    metrics = invalid_move_metrics(samples, "env/")
    assert metrics["env/opponent_invalid_moves"] == 1.0 and metrics["env/opponent_invalid_endings"] == 0.0
    assert "env/opponent_invalid_moves" not in invalid_move_metrics(
        [SimpleNamespace(meta={"env": {"infos": [{"invalid_move": False}]}})], "env/"
    )  # single-player games have no opponent to count


def test_the_settings_reach_the_pool_from_the_model_and_rollout_keys(tmp_path):
    cfg = load_config(None, [*FROZEN, "rollout.temperature=0.7", "rollout.max_new_tokens=12"])
    m = cfg.task.env_config["opponent_model"]
    assert (m["temperature"], m["max_tokens"]) == (0.7, 12)  # the policy's own sampling, one turn's tokens
    assert "opponent_model" not in load_config(None, [*FROZEN[:2], "task.opponent=random"]).task.env_config
    save_resolved(cfg, tmp_path / "config.yaml")
    again = load_config(tmp_path / "config.yaml", ["rollout.max_tokens_per_turn=5", "model.path=tiny-textgame"])
    m = again.task.env_config["opponent_model"]
    assert (m["path"], m["max_tokens"]) == ("tiny-textgame", 5)  # refilled on load, not the saved values


def test_bad_frozen_opponent_settings_are_one_line_each():
    (p,) = problems("task.env_id=GuessTheNumber-v0", "task.opponent=frozen_policy")
    assert p == "task.opponent: GuessTheNumber-v0 is a single-player game; leave task.opponent out"
    (p,) = problems("task.env_id=TicTacToe-v0")
    assert p.endswith("task.opponent=frozen_policy (the starting model, frozen)")
    (p,) = problems("task.env_id=TicTacToe-v0", "task.opponent=random", "task.opponent_temperature=0.5")
    assert p == "task.opponent_temperature: only task.opponent=frozen_policy samples; 'random' does not"
    (p,) = problems(*FROZEN[1:], "task.opponent_temperature=-1")
    assert p == "task.opponent_temperature: must be a finite number >= 0 (0: greedy), got -1.0"
    with pytest.raises(ConfigError, match="task.opponent_temperature: only task.name=textarena reads it"):
        load_config(None, ["task.opponent_temperature=0"])
