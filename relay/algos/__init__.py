"""RL math: advantage estimators, policy and value losses, KL, the objective. Pure functions of tensors.

    registry.py         the names algorithm.* chooses among and their hyperparameters (no torch)
    estimators/         one module per advantage estimator (grpo, gae, ...): name, hyperparameters, math
    policy_losses/      one module per policy loss (ppo, gspo, cispo, ...): name, hyperparameters, math
    objective.py        the learner's whole loss and the critic's, composed
    advantages.py       the estimators' shared pieces, compute_advantages by name, DAPO's sample-level steps
    losses.py           the policy losses' shared pieces, aggregation, value loss, entropy, IS weights
    kl.py               KL(pi || ref) estimators
    utils.py            masked reductions

Importing this package loads no torch: the driver validates `algorithm.*` through registry.py
and kl.py. Import names from their modules.
"""
