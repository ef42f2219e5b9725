"""Policy losses: one module each, its name the value of `algorithm.policy_loss`
(relay/algos/registry.py finds them). A module holds, torch-free when imported:

    Hyperparameters   frozen dataclass of the loss's hyperparameters (defaults, comments) with
                      problems() -> {field: what is wrong}
    per_token_loss(hyperparameters, *, logprobs, old_logprobs, advantages, loss_mask) -> TokenLoss
                      all tensors [B,R]; loss_mask is 1 on model tokens. It imports torch inside,
                      so the driver reads Hyperparameters without loading torch. Positions under
                      mask 0 may hold anything (NaN, inf): select with relay.algos.losses.on_tokens
                      before any product or exp.

relay/algos/objective.py does the rest for every loss alike: truncated-IS weights, aggregation
(algorithm.loss_agg), the metrics, the KL and entropy terms. Adding a loss is adding a module
here, a hand-computed test, and its row in the README's algorithm table.
"""
