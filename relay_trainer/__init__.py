"""The layer above the actors: the RL loop (loop.py), RayPPOTrainer (ppo_trainer.py), Ray Tune
sweeps (tune.py) and the `relay` command (cli.py). Imports run relay <- actors <- relay_trainer <-
driver.py, tune.py (the root scripts: thin entries).

`from relay import RayPPOTrainer` reaches ppo_trainer.py by name on first use, so importing
relay itself never loads ray.
"""
