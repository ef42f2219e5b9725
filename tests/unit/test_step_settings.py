"""The driver's step and held-out evaluation read settings picked once from the config
(relay/config/role_settings.py): the values they act on are the config's own."""

from types import SimpleNamespace

from relay.config import load_config
from relay.config.role_settings import HeldOutSettings, StepSettings
from relay.types import Sample
from relay_trainer.steps import held_out_metrics, sampling_round, score


def episode(model_tokens: int, reward: float = 1.0, tool_calls: int = 0) -> Sample:
    return Sample(
        prompt_ids=[1],
        response_ids=[2] * model_tokens,
        loss_mask=[1] * model_tokens,
        reward=reward,
        tool_calls=[{"ok": True}] * tool_calls,
    )


def test_score_punishes_overlong_samples_from_the_rollouts_max_new_tokens():
    """DAPO's buffer: no penalty up to max_new_tokens - overlong_buffer_len, the whole one at max_new_tokens."""
    cfg = load_config(None, ["rollout.max_new_tokens=10", "algorithm.overlong_buffer_len=4"])
    short, ramp, full = episode(6), episode(8), episode(10)
    score(StepSettings.of(cfg), SimpleNamespace(reward_model=None), [short, ramp, full])
    assert [short.reward, ramp.reward, full.reward] == [1.0, 0.5, 0.0]


def test_each_try_of_each_step_has_its_own_sampling_round():
    settings = StepSettings.of(load_config(None, ["algorithm.dynamic_sampling_max_tries=3"]))
    assert [sampling_round(settings, step, attempt) for step in (0, 1) for attempt in (0, 1, 2)] == list(range(6))


def test_held_out_metrics_count_tool_calls_only_in_runs_with_tools():
    samples = [episode(2, reward=1.0, tool_calls=2), episode(2, reward=0.0)]
    plain = held_out_metrics(HeldOutSettings.of(load_config(None, [])), samples)
    assert plain == {"eval/accuracy": 0.5}
    with_tools = held_out_metrics(HeldOutSettings.of(load_config(None, ["tools.enabled=true"])), samples)
    assert with_tools["eval/accuracy"] == 0.5 and with_tools["eval/tool_calls_per_episode"] == 1.0
