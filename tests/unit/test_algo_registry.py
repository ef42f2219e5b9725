"""relay/algos/registry.py: every estimator and policy loss module keeps the contract, is read
without torch, and binds to the config with one line per problem, naming its key."""

import dataclasses
import subprocess
import sys

import pytest

from relay.algos.registry import ESTIMATORS, POLICY_LOSSES
from relay.config import AlgorithmConfig, ConfigError, load_config


@pytest.mark.parametrize("registry", [ESTIMATORS, POLICY_LOSSES], ids=["estimators", "policy_losses"])
def test_every_module_keeps_the_contract(registry):
    shared = {f.name: f.default for f in dataclasses.fields(AlgorithmConfig)}
    for name, module in registry.items():
        defaults = module.Hyperparameters()
        assert defaults.problems() == {}, name
        assert callable(module.advantages if registry is ESTIMATORS else module.per_token_loss), name
        if registry is ESTIMATORS:
            assert dataclasses.is_dataclass(module.TRAITS), name
        # A field read from a shared algorithm.* key must default as that key does, or library calls
        # and config runs would differ.
        for field in dataclasses.fields(defaults):
            if field.name in shared:
                assert field.default == shared[field.name], (name, field.name)


def test_the_registry_is_read_and_checked_without_torch():
    code = (
        "import sys; from relay.algos.registry import ESTIMATORS, POLICY_LOSSES; "
        "from relay.config import load_config; "
        "load_config(None, ['algorithm.policy_loss=cispo', 'algorithm.policy_loss_args.eps_high_is=3']); "
        "[m.Hyperparameters().problems() for r in (ESTIMATORS, POLICY_LOSSES) for m in r.values()]; "
        "assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "overrides, problem",
    [
        (["algorithm.policy_loss=ppo2"], "algorithm.policy_loss: 'ppo2' is not one of"),
        (
            ["algorithm.policy_loss=cispo", "algorithm.policy_loss_args.eps_hi=1"],
            "algorithm.policy_loss_args.eps_hi: not a hyperparameter of policy loss cispo (did you mean eps_high_is?)",
        ),
        (
            ["algorithm.policy_loss=cispo", "algorithm.policy_loss_args.eps_high_is=x"],
            "algorithm.policy_loss_args.eps_high_is: expected a number, got 'x'",
        ),
        (
            ["algorithm.policy_loss=sapo", "algorithm.policy_loss_args.tau_neg=0"],
            "algorithm.policy_loss_args.tau_neg: must be > 0, got 0.0",
        ),
        (
            ["algorithm.policy_loss_args.clip_low=0.1"],
            "algorithm.policy_loss_args.clip_low: set algorithm.clip_low instead",
        ),
        # a shared key is checked whichever loss is chosen
        (["algorithm.policy_loss=sapo", "algorithm.dual_clip_c=1"], "algorithm.dual_clip_c: must be > 1, got 1.0"),
        (["algorithm.estimator_args.eps=-1"], "algorithm.estimator_args.eps: must be > 0, got -1.0"),
        (["algorithm.gamma=2"], "algorithm.gamma: must be in [0, 1], got 2.0"),
    ],
)
def test_one_line_per_problem_naming_its_key(overrides, problem):
    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    assert len(e.value.problems) == 1 and e.value.problems[0].startswith(problem), e.value.problems


def test_library_calls_check_their_keywords():
    with pytest.raises(TypeError, match="no policy loss takes"):
        POLICY_LOSSES.from_keywords("ppo", {"clip_lo": 0.1})
    with pytest.raises(ValueError, match="dual_clip_c: must be > 1"):
        POLICY_LOSSES.from_keywords("dual_clip", {"dual_clip_c": 0.5})
    # a keyword only another loss takes is ignored: one call may carry every loss's settings
    assert POLICY_LOSSES.from_keywords("ppo", {"clip_high": 0.3, "tau_pos": 2.0}).clip_high == 0.3
