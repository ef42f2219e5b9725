"""Checks of the pipeline keys (training.mode, max_staleness, stale_groups, groups_per_call) and of
resources.colocate, which needs a pipeline whose phases never overlap."""

from __future__ import annotations

from dataclasses import replace

from relay.config.engine_registry import cannot, capabilities
from relay.config.resolved import tis_cap
from relay.config.roles import followers
from relay.config.schema import Config, TrainingConfig

MODES = ("sync", "one_step_off", "async")
STALE_GROUPS = ("drop", "regenerate")


def validate_pipeline(cfg: Config) -> list[str]:
    t, p = cfg.training, []
    if t.mode not in MODES:
        p.append(f"training.mode: {t.mode!r} is not one of {list(MODES)}")
    if t.stale_groups not in STALE_GROUPS:
        p.append(f"training.stale_groups: {t.stale_groups!r} is not one of {list(STALE_GROUPS)}")
    if t.max_staleness < 0:
        p.append(f"training.max_staleness: must be >= 0, got {t.max_staleness}")
    if t.groups_per_call < 0:
        p.append(
            f"training.groups_per_call: must be >= 0 (0: prompts_per_step / rollout workers), got {t.groups_per_call}"
        )
    p += validate_partial(cfg)
    if t.mode == "sync":
        return p
    # Overlap needs the engines awake while the learner trains; a step's groups are filtered as they
    # arrive, not retried in rounds.
    if cfg.rollout.sleep_while_training:
        p.append(
            f"rollout.sleep_while_training: the engines cannot sleep in training.mode={t.mode} (it overlaps them with training)"
        )
    if cfg.algorithm.dynamic_sampling:
        p.append(f"algorithm.dynamic_sampling: supported in training.mode=sync only, not {t.mode}")
    return p


def validate_partial(cfg: Config) -> list[str]:
    """rollout.partial: weights loaded mid-call, so a sample's tokens may come from several versions."""
    r, p = cfg.rollout, []
    if r.partial_chunk < 1:
        p.append(
            f"rollout.partial_chunk: must be >= 1 (new tokens per generate between two weight checks), got {r.partial_chunk}"
        )
    if not r.partial:
        return p
    if cfg.training.mode not in ("one_step_off", "async"):
        p.append(
            f"rollout.partial: weights arrive mid-rollout only when rollout overlaps training: it needs "
            f"training.mode one_step_off or async, not {cfg.training.mode}"
        )
    elif tis_cap(cfg) is None:  # each token's importance weight uses the logprob of the weights that sampled it
        p.append(
            "rollout.partial: tokens sampled by older weights need importance weights, which "
            "algorithm.tis_cap=0 turns off: set it >= 1, or null (2.0 in one_step_off / async)"
        )
    if not capabilities(r.engine).partial_rollouts:
        chunks = lambda can: can.partial_rollouts
        p.append(cannot("rollout.partial", r.engine, "generate in chunks and load weights between them", chunks))
    res = cfg.resources
    broadcast = res.weight_sync == "broadcast" or (
        res.weight_sync == "auto" and res.learner.gpus >= 1 and res.rollout.gpus >= 1
    )  # relay_trainer/weights.py uses_broadcast (not imported here: it imports ray)
    if broadcast:
        p.append(
            "rollout.partial: a worker loads staged weights at its next pause, but a broadcast needs every "
            "worker receiving at once: set resources.weight_sync=object_store"
        )
    return p


def validate_colocate(cfg: Config) -> list[str]:
    """resources.colocate: the learner's module generates, so the phases must never overlap and
    there must be one module: an engine that can generate from it (capability colocate), one rollout
    worker, one learner actor."""
    res, t, p = cfg.resources, cfg.training, []
    if not res.colocate:
        return p
    why = "resources.colocate=true runs rollout inside the one learner actor"
    if t.mode != "sync":
        p.append(f"{why}, so rollout cannot overlap training: it needs training.mode=sync, not {t.mode}")
    if not capabilities(cfg.rollout.engine).colocate:
        shares = lambda can: can.colocate
        p.append(cannot("resources.colocate", cfg.rollout.engine, "generate from the learner's own module", shares))
    if res.rollout.count != 1:
        p.append(f"{why}: it needs resources.rollout.count=1, not {res.rollout.count}")
    if is_sharded(t, res.learner.count):
        p.append(
            f"{why}: it needs one learner actor, not an FSDP rank group (resources.learner.count={res.learner.count}, "
            f"training.cpu_offload={t.cpu_offload})"
        )
    return p


def with_layout(cfg: Config) -> Config:
    """`cfg` with resources.colocate's null decided: colocated wherever validate_colocate finds
    nothing against it, the weight transport was left to relay (a transport asked for by name is
    one between separate actors), the rollout worker asks for no node the learner's resources
    would not give it, and no role follows the rollout worker (relay/config/roles.py)."""
    res = cfg.resources
    if res.colocate is not None:
        return cfg
    possible = not validate_colocate(replace(cfg, resources=replace(res, colocate=True)))
    same_node = res.rollout.node_resource in (None, res.learner.node_resource)
    separate = res.weight_sync != "auto" or bool(followers(cfg))
    return replace(cfg, resources=replace(res, colocate=possible and same_node and not separate))


def is_sharded(training: TrainingConfig, count: int) -> bool:
    """Whether a role (learner, reference, critic) of `count` actors runs as an FSDP rank group
    (relay/update/fsdp.py; here, without torch: validation and the driver never import it). One
    actor runs training.mixed_precision itself, under autocast (relay/update/precision.py)."""
    return count > 1 or training.cpu_offload
