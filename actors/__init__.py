"""The code that runs inside actor processes: one plain class per role, and the bases they share.
ray.remote is applied where the driver makes them (relay_trainer/pools.py); the driver's side of
the actors (the step, the producer, supervision and restore, weight-sync orchestration) is relay_trainer/."""
