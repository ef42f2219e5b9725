"""Ray plumbing: thin plain classes. ray.remote is applied where pools are made (pools.py)."""
