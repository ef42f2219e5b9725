"""Advantage estimators: one module each, its name the value of `algorithm.estimator`
(relay/algos/registry.py finds them). A module holds, torch-free when imported:

    Hyperparameters   frozen dataclass of the estimator's hyperparameters (defaults, comments)
                      with problems() -> {field: what is wrong}
    TRAITS            EstimatorTraits: whether it needs the critic's values, adds token rewards
                      itself, needs groups of samples per prompt
    advantages(hyperparameters, *, rewards [B], loss_mask [B,R], group_ids [B],
               token_rewards [B,R] | None, values [B,R] | None, baseline [B] | None,
               responses [B,R] | None)
        -> (advantages [B,R], returns [B,R])
                      it names the inputs its math reads (a caller passes only those);
                      both outputs are 0 wherever loss_mask == 0. It imports torch inside,
                      so the driver reads the rest without loading torch.

`returns` is the reward-to-go of the real rewards at each model token, without baseline or
normalization (GAE: advantages + values, the critic's target). Group estimators (grpo, dr_grpo,
rloo) use only the sequence reward, so their returns are that reward broadcast.

Multi-turn episodes interleave model tokens (loss_mask 1) with observation tokens (loss_mask 0).
Token-level estimators run their recursions over model tokens only, as if observations were
absent: an observation is not an action, so it neither gets credit nor costs a discount step. A
token reward that sits on an observation token is credited to the model token just before it
(the action that caused it); one before the first model token credits no action and is dropped.
The shared pieces (group statistics, token-level rewards, reward-to-go) are in
relay/algos/advantages.py.
"""
