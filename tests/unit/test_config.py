"""Config: YAML + overrides, every error at once with its key path, shipped configs valid."""

from pathlib import Path

import pytest
import yaml

from relay.config import Config, ConfigError, load_config, save_resolved
from relay.config.resolved import tis_cap

REPO = Path(__file__).resolve().parents[2]
RUN_CONFIGS = sorted(p for p in (REPO / "configs").glob("*.yaml") if p.name != "tune.yaml")


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_validates(path):
    assert isinstance(load_config(path), Config)


def test_defaults_validate_without_a_file():
    assert load_config(None).rollout.engine == "hf"


def test_overrides_are_typed_and_dotted():
    cfg = load_config(
        REPO / "configs/default.yaml", ["training.lr=1e-5", "rollout.n=4", 'rollout.stop=["</tool>"]', "run.name=x"]
    )
    assert cfg.training.lr == 1e-5 and isinstance(cfg.training.lr, float)
    assert cfg.rollout.n == 4 and cfg.rollout.stop == ("</tool>",) and cfg.run.name == "x"


def test_bad_config_lists_every_problem_with_its_key():
    with pytest.raises(ConfigError) as err:
        load_config(
            REPO / "configs/default.yaml",
            [
                "training.lrr=1",  # unknown key
                "rollout.temperature=hot",  # wrong type
                "rollout.top_p=1.5",  # out of range
                "rollout.engine=vlm",  # not a choice
                "training.prompts_per_step=15",
                "resources.rollout.count=2",  # does not divide
                "checkpoint.keep_last_n=0",
            ],
        )
    problems = err.value.problems
    text = "\n".join(problems)
    assert "training.lrr: unknown key (did you mean training.lr?)" in text
    assert "rollout.temperature: expected a number" in text
    assert "rollout.top_p: must be in (0, 1]" in text
    assert "rollout.engine: 'vlm' is not one of" in text and "did you mean 'vllm'" in text
    assert "does not divide among resources.rollout.count=2" in text
    assert "checkpoint.keep_last_n" in text
    assert len(problems) == 6


def test_unknown_section_and_bad_override_syntax(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainig:\n  steps: 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(bad, ["no_equals_sign"])
    text = str(err.value)
    assert "trainig: unknown key (did you mean training?)" in text
    assert "override 'no_equals_sign'" in text


def test_missing_files_and_dotted_paths_are_reported(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(
            None, ["task.name=custom", f"task.train_file={tmp_path}/nope.jsonl", "task.reward_fn=no_such_pkg:fn"]
        )
    text = str(err.value)
    assert "task.train_file: file not found" in text and "task.reward_fn: cannot load 'no_such_pkg:fn'" in text


def test_resolved_config_round_trips(tmp_path):
    cfg = load_config(REPO / "configs/default.yaml", ["training.steps=7"])
    save_resolved(cfg, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["training"]["steps"] == 7


def test_old_tool_keys_are_unknown_with_the_new_name():
    # tools.limits became tools.sandbox_limits (tools.sandbox is the mode, as on the tool server).
    with pytest.raises(ConfigError) as err:
        load_config(REPO / "configs/math_tool.yaml", ["tools.limits.memory_mb=128"])
    assert err.value.problems == ["tools.limits: unknown key (did you mean tools.sandbox_limits?)"]
    cfg = load_config(REPO / "configs/math_tool.yaml", ["tools.sandbox=none", "tools.sandbox_limits.memory_mb=128"])
    assert cfg.tools.sandbox == "none" and cfg.tools.sandbox_limits.memory_mb == 128


def test_sandbox_limits_and_client_settings_are_checked_with_their_keys():
    with pytest.raises(ConfigError) as err:
        load_config(
            REPO / "configs/math_tool.yaml",
            [
                "tools.sandbox_limits.memory_mb=0",
                "tools.sandbox_limits.max_pids=2",
                "tools.sandbox=docker",
                "tools.server_url=ftp://x",
                "tools.timeout=0",
                "tools.parser=tagg",
            ],
        )
    text = "\n".join(err.value.problems)
    assert "tools.sandbox_limits.memory_mb: must be > 0, got 0" in text
    assert "tools.sandbox_limits.max_pids: must be >= 4" in text
    assert "tools.sandbox: 'docker' is not one of ['bwrap', 'none']" in text
    assert "tools.server_url: must be http(s)://host:port, got 'ftp://x'" in text
    assert "tools.timeout: must be > 0" in text
    assert "tools.parser: 'tagg' is not one of" in text
    assert len(err.value.problems) == 6


def test_tool_parser_names_match_the_parsers():
    from relay.config import TOOL_PARSERS
    from relay.tools.parsers import PARSERS

    assert sorted(TOOL_PARSERS) == sorted(PARSERS)


def test_tool_server_settings_share_the_checks():
    from relay.config import SandboxConfig, ToolServerConfig, validate_tool_server

    assert validate_tool_server(ToolServerConfig()) == []
    assert validate_tool_server(
        ToolServerConfig(port=-1, sandbox="docker", sandbox_limits=SandboxConfig(wall_timeout_s=0))
    ) == [
        "sandbox: 'docker' is not one of ['bwrap', 'none']",
        "port: must be in [0, 65535], got -1",
        "sandbox_limits.wall_timeout_s: must be > 0, got 0",
    ]


def test_enabled_loggers_need_their_packages_before_any_actor_starts(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)  # not importable
    with pytest.raises(ConfigError) as err:
        load_config(REPO / "configs/default.yaml", ["logging.wandb=true"])
    assert err.value.problems == [
        "logging.wandb: the `wandb` package is not installed: pip install 'relay[loggers]' (or set logging.wandb=false)"
    ]
    with pytest.raises(ConfigError) as err:
        load_config(REPO / "configs/default.yaml", ["logging.wandb_mode=cloud", "logging.wandb=true"])
    assert "logging.wandb_mode: 'cloud' is not one of ['online', 'offline', 'disabled', 'shared']" in err.value.problems
    assert (
        load_config(REPO / "configs/default.yaml", ["logging.wandb_mode=cloud"]).logging.wandb_mode == "cloud"
    )  # unused while wandb is off


def test_dotted_paths_resolve_once_per_process():
    from relay.config import resolve_dotted

    path = "relay.envs.arithmetic:arithmetic_reward"
    assert resolve_dotted(path) is resolve_dotted(path)
    hits = resolve_dotted.cache_info().hits
    load_config(REPO / "configs/default.yaml")  # validate() loads task.reward_fn: from the cache
    assert resolve_dotted.cache_info().hits > hits
    with pytest.raises(ConfigError) as err:
        load_config(REPO / "configs/math_tool.yaml", ["tools.functions=[no_such_pkg:tool]"])
    assert "tools.functions[0]: cannot load 'no_such_pkg:tool'" in str(err.value)


def test_agent_limits_are_built_from_the_config():
    from relay.agent.loop import AgentLimits

    cfg = load_config(REPO / "configs/math_tool.yaml")
    assert AgentLimits.of(cfg.rollout, cfg.tools) == AgentLimits(
        max_turns=3, max_tool_turns=2, max_tokens_per_turn=32, max_total_tokens=128
    )
    textgame = load_config(REPO / "configs/textgame.yaml")  # no tools: no tool turns
    assert AgentLimits.of(textgame.rollout, textgame.tools).max_tool_turns == 0


@pytest.mark.parametrize(
    "overrides, cap",
    [
        ([], None),  # sync: samples come from the weights being trained
        (["training.mode=async"], 2.0),  # stale samples need importance weights (docs/pipeline.md)
        (["training.mode=one_step_off"], 2.0),
        (["training.mode=async", "algorithm.tis_cap=0"], None),  # off, by hand
        (["algorithm.tis_cap=5"], 5.0),
    ],
)
def test_a_null_tis_cap_is_resolved_by_the_training_mode(overrides, cap):
    assert tis_cap(load_config(None, overrides)) == cap


def test_a_tis_cap_between_0_and_1_is_refused_with_one_line():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["algorithm.tis_cap=0.5"])
    assert e.value.problems == ["algorithm.tis_cap: must be >= 1, 0 (off) or null (by training.mode), got 0.5"]
