"""Reward models: what they read and how a verdict becomes a reward (reward_model), the two kinds
of scorer (scorers), the shipped tiny reward model's build (build_rm) and the reward hacks GRPO runs
found against it, collected for its next build (hacks, rm_hacks.jsonl)."""
