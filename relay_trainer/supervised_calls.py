"""The step's calls on the reference and the critic, each with what its loss needs (the learner's
loss is LearnerRecovery's: relay_trainer/learner_recovery.py).

The reference's state is its constructor's (the model path's frozen weights), so a reference that
died or hung (killed past its deadline) is restarted and its pass made again; a rank group's ranks
are all restarted and the group formed again. The critic is not restarted: its update is made once
more only when the learner was restored meanwhile, since then the call failed on an argument the
lost learner made, and never ran.
"""

from __future__ import annotations

from ray.exceptions import RayActorError

from actors.restarts import process_ids, wait_restarted
from actors.supervision import ATTEMPTS_PER_CALL, role_actors
from relay.failures import ActorLost
from relay_trainer.rank_group import RankGroup


def reference_logprobs(actors, step_ref):
    """The reference's logprobs (a ref: they stay in the object store, and no torch here). Its
    process id tells a pass that outlived its process. A pass that raised stops the run when the
    update reads it."""
    faults, reference = actors.faults, actors.reference
    ranks = role_actors(reference)
    for attempt in range(1, ATTEMPTS_PER_CALL + 1):
        before = process_ids(ranks)
        ref = reference.compute_logprobs.remote(step_ref)
        try:
            faults.wait(ref, reference, "reference logprobs", long=True)
            if process_ids(ranks) == before:
                return ref
            faults.count("actor_errors")
        except ActorLost:  # hung, and killed to be restarted
            pass
        faults.log(f"relay: fault: reference logprobs: the reference was lost; restarting it (attempt {attempt + 1})")
        restarted = (
            reference.restart(ranks, faults.rollout_timeout_s)
            if isinstance(reference, RankGroup)
            else wait_restarted(reference, faults.rollout_timeout_s)
        )
        if not restarted:
            raise ActorLost("reference: the actor is gone (lost in its pass, and no replacement answered)")
        faults.count("restarts")
        faults.count("retried_calls")
    raise ActorLost(f"reference logprobs: the reference was lost {ATTEMPTS_PER_CALL} times in a row")


def critic_update(actors, call, kwargs: dict, learner_restored: bool) -> dict[str, float]:
    """The critic's update `call` (sent with the learner's) waited for; past its deadline the run stops."""
    faults, critic = actors.faults, actors.critic
    try:
        return faults.get(call, critic, "update", long=True)
    except RayActorError:
        if not learner_restored or not wait_restarted(critic, faults.timeout_s):  # the critic is not restarted
            raise
    # alive, so its call failed on an argument the lost learner made, and never ran: once more
    return faults.get(critic.update.remote(**kwargs), critic, "update", long=True)
