"""The layer above the actors: the RL loop (loop.py), RayPPOTrainer (ppo_trainer.py), Ray Tune
sweeps (tune.py) and the `relay` command (cli.py), and the driver's side of the actors: the pools
and placement (pools.py, feasibility.py, local_ray.py, actor_class.py), the step's plan (steps.py)
and the async producer (producer.py), weight-sync orchestration (weights.py), restore and
checkpoints (learner_recovery.py, checkpoints.py), the handles that stand for several actors
(rank_group.py, lora_reference.py, reward_model_pool.py), the supervised stage (sft.py), Ray
metrics (metrics.py), fault arming (fault_arming.py) and the elastic pool (elastic.py). Imports run
relay <- actors <- relay_trainer <- driver.py, tune.py (the root scripts: thin entries).

`from relay import RayPPOTrainer` reaches ppo_trainer.py by name on first use, so importing
relay itself never loads ray.
"""
