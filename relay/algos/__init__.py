"""RL math, pure functions of tensors: advantage estimators (advantages), policy and value losses
(losses), KL estimators (kl), masked reductions (utils), and the names config values choose among
(names, torch-free: the driver validates a config without importing torch)."""
