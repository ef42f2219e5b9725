"""Reward models: what they read and how a verdict becomes a reward (reward_model), the two kinds
of scorer (scorers), and the collected reward hacks that train the next tiny reward model (rm_hacks)."""
