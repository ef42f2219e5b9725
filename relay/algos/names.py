"""The names config values choose among in relay.algos, without its tensors: validation and the
driver read them before (or without) importing torch. relay.algos builds its dicts over the same
names (tests/unit/test_torch_free_driver.py checks that they agree)."""

ESTIMATOR_NAMES = ("grpo", "dr_grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gae")
# Estimators that add token_rewards themselves (per-turn environment rewards, KL-in-reward).
TOKEN_LEVEL_ESTIMATORS = frozenset({"gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline"})
POLICY_LOSS_NAMES = ("ppo", "dual_clip", "gspo")
AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
