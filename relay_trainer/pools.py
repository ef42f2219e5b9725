"""Resource pools = placement groups; actors are created on them, named by role."""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from actors.supervision import Supervisor, role_actors
from relay.config import Config, RoleResources, resolve_dotted
from relay.config.elastic import fixed
from relay.config.role_settings import (
    ColocatedSettings,
    CriticSettings,
    PolicySettings,
    RewardModelSettings,
    RewardPoolSettings,
    RolloutSettings,
)
from relay.config.roles import followers, uses_env_pools, uses_tool_executors
from relay.config.validate_pipeline import is_sharded
from relay.endpoint.auth import run_token
from relay.models.check import reward_model_path
from relay.run.progress import phase, say
from relay_trainer import local_ray
from relay_trainer.actor_class import actor_class
from relay_trainer.feasibility import alive_nodes, check_feasible, role_bundle, unplaceable, wait_placed
from relay_trainer.followers import worker_links, worker_places
from relay_trainer.learner_recovery import LearnerRecovery, NoRecovery
from relay_trainer.local_ray import NAMESPACE
from relay_trainer.lora_reference import LearnerAsReference
from relay_trainer.rank_group import RankGroup
from relay_trainer.reward_model_pool import RewardModelPool
from relay_trainer.weights import WEIGHT_LANE, BroadcastGroup, broadcast_backend, open_shared_memory, uses_broadcast

# The actors' classes, started here without importing them (their torch and model code stays out of
# the driver's process: relay_trainer/actor_class.py)
ColocatedWorker = actor_class("actors.colocated", "ColocatedWorker")
Critic = actor_class("actors.critic", "Critic")
EnvPool = actor_class("actors.env", "EnvPool")
Learner = actor_class("actors.learner", "Learner")
Reference = actor_class("actors.learner", "Reference")
RewardModel = actor_class("actors.reward_model", "RewardModel")
RolloutWorker = actor_class("actors.rollout", "RolloutWorker")
ToolExecutor = actor_class("actors.tools", "ToolExecutor")


def connect(cfg: Config) -> None:
    """Join the cluster named by config or RAY_ADDRESS (set by `ray job submit`), else start one;
    then check that the cluster can hold every role's actors (ConfigError naming the role if not).

    A Ray that relay started for an earlier run in this process and that cannot hold this run
    (too few CPUs, no dashboard when asked for one, or a cluster named now) is stopped and
    started again for this run; a Ray the user started or joined is only checked."""
    bundles = {role: (res, role_bundle(res)) for role, res in actor_roles(cfg).items()}
    address = cfg.resources.ray_address or os.environ.get("RAY_ADDRESS")
    if local_ray.started_here():
        misfit = [] if address else unplaceable(bundles, alive_nodes())
        if cfg.resources.dashboard and not local_ray.has_dashboard():
            misfit.append("resources.dashboard=true: it was started without the dashboard")
        if address:
            misfit.append(f"this run joins the cluster at {address}")
        if misfit:
            say(
                "the local Ray started for an earlier run does not fit this one, so it starts anew: "
                + "; ".join(misfit)
            )
            local_ray.stop()
    if not ray.is_initialized():
        if address:
            ray.init(address=address, namespace=NAMESPACE)
        else:
            local_ray.start(sum(res.cpus * res.count for res in actor_roles(cfg).values()), cfg.resources.dashboard)
    check_feasible(bundles)


def actor_roles(cfg: Config) -> dict[str, RoleResources]:
    """The roles `cfg` makes actors for, in the order actor_pools creates them, each with its
    resources (`count` actors of it). The one place that says which roles a run has."""
    res = cfg.resources
    roles = {"tools": cfg.tools.executors} if uses_tool_executors(cfg) else {}
    if uses_env_pools(cfg):
        roles["env"] = res.env
    if res.colocate:  # one actor is learner and rollout worker (actors/colocated.py), on the learner's resources
        roles["learner"] = res.learner
    else:
        roles.update(rollout=fixed(res.rollout), learner=res.learner)  # an elastic pool starts with its min
    workers = fixed(res.rollout).count
    for role, per_worker in followers(cfg).items():  # count actors per rollout worker (relay/config/roles.py)
        roles[role] = replace(per_worker, count=per_worker.count * workers)
    if cfg.algorithm.kl_coef > 0 and not cfg.model.lora.rank:  # KL needs reference logprobs; LoRA: the learner's
        roles["reference"] = res.reference
    if cfg.critic.enabled:
        roles["critic"] = res.critic
    if cfg.reward_model.path is not None:
        roles["reward_model"] = res.reward_model
    return roles


def actor_bundles(cfg: Config) -> list[dict[str, float]]:
    """One placement-group bundle per actor that actor_pools makes for `cfg` (what a Ray Tune
    trial reserves for them: tune.trial_bundles)."""
    return [role_bundle(res) for res in actor_roles(cfg).values() for _ in range(res.count)]


# Bundles of an enclosing placement group already given to one run's actors: (group, run) -> indices.
_claimed: dict[tuple[str, str], set[int]] = {}


def _claim_bundles(pg, bundle: dict[str, float], count: int, role: str, run_name: str) -> list[int]:
    """Indices of `count` unclaimed bundles of `pg` shaped exactly like `bundle`. Bundle 0 is the
    caller's own (Ray Tune schedules the trainable there), so it is never handed out. Matching by
    shape, not position, keeps this independent of role order."""

    def same(spec: dict) -> bool:
        spec = {k: v for k, v in spec.items() if v > 0 and k != "bundle"}
        return spec.keys() == bundle.keys() and all(abs(spec[k] - bundle[k]) < 1e-9 for k in bundle)

    taken = _claimed.setdefault((pg.id.hex(), run_name), {0})
    free = [i for i, spec in enumerate(pg.bundle_specs) if i not in taken and same(spec)]
    if len(free) < count:
        raise RuntimeError(
            f"the enclosing placement group has {len(free)} free bundle(s) shaped {bundle} for "
            f"{count} {role} actor(s); build it with tune.trial_bundles(cfg) (bundles: {pg.bundle_specs})"
        )
    taken.update(free[:count])
    return free[:count]


def create_group(
    cls,
    role: str,
    res: RoleResources,
    run_name: str,
    make_args,
    groups: list,
    max_restarts: int = 0,
    concurrency_groups: dict[str, int] | None = None,
    places: list[tuple] | None = None,
) -> list:
    """`res.count` actors of `cls`, one bundle each, named `<run>/<role>-<i>` for the dashboard;
    Ray rebuilds a lost one (its constructor again) up to `max_restarts` times (actors/supervision.py).

    Inside a Ray Tune trial the trial's placement group already holds a bundle per actor
    (tune.trial_bundles): the actors go there, since a new group could never be placed while
    the trial holds the resources. Elsewhere each role gets its own PACKed group, or the caller
    gives `places`: (placement group, bundle index, actor index) per actor (a rollout worker's
    group, which holds the roles that follow it: relay_trainer/followers.py).
    """
    if places is None:
        bundle = role_bundle(res)
        enclosing = ray.util.get_current_placement_group()
        if enclosing is not None:
            pg, indices = enclosing, _claim_bundles(enclosing, bundle, res.count, role, run_name)
        else:  # actors wait in Ray for their group to be placed: the roles start at once (actor_pools waits)
            pg = placement_group([bundle] * res.count, strategy="PACK", name=f"{run_name}/{role}")
            groups.append(pg)
            indices = list(range(res.count))
        places = [(pg, index, i) for i, index in enumerate(indices)]
    # concurrency groups are fixed where the class is made remote (Ray takes them in ray.remote, not .options)
    remote_cls = ray.remote(concurrency_groups=concurrency_groups)(cls) if concurrency_groups else ray.remote(cls)
    return [
        remote_cls.options(
            name=actor_name(run_name, role, i),
            num_cpus=res.cpus,
            num_gpus=res.gpus,
            max_restarts=max_restarts,
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index),
        ).remote(*make_args(i))
        for pg, index, i in places
    ]


def actor_name(run_name: str, role: str, i: int) -> str:
    """The name create_group gives actor i of a role (the dashboard shows it; ray.get_actor finds it)."""
    return f"{run_name}/{role}-{i}"


def create_role(
    cls, role: str, settings, cfg: Config, res: RoleResources, run_name: str, model_path: str, groups: list
):
    """The learner, reference or critic, started with its `settings` (relay/config/role_settings.py): one
    actor, or a RankGroup of `res.count` ranks (one PACKed placement group: one node when it fits) when the
    role is sharded (relay/update/fsdp.py), formed by `RankGroup.join` once every rank's constructor is done."""
    # learner: restored in place (relay_trainer/learner_recovery.py); the frozen reference: restarted (relay_trainer/steps.py)
    lives = {"learner": cfg.resources.learner_restores, "reference": cfg.resources.max_restarts}.get(role, 0)
    ranks = create_group(cls, role, res, run_name, lambda i: (settings, model_path, threads(cfg, res)), groups, lives)
    return RankGroup(ranks, cls) if is_sharded(settings.training, res.count) else ranks[0]


def rank_backend(res: RoleResources) -> str:
    return "nccl" if res.gpus >= 1 else "gloo"


def threads(cfg: Config, res: RoleResources) -> int:
    """torch threads of one actor of a role: its whole CPUs. On a Ray started here in sync mode,
    where rollout and update take turns, a role's actors split every core of the machine between
    them instead: the phase that runs uses the cores the idle roles hold."""
    share = max(1, int(res.cpus))
    if cfg.training.mode != "sync" or cfg.resources.ray_address or os.environ.get("RAY_ADDRESS"):
        return share
    return max(share, (os.cpu_count() or 1) // res.count)


def create_tool_executors(
    cfg: Config, run_name: str, groups: list, places: list[tuple] | None = None, wait: bool = True
) -> list:
    """ToolExecutor actors that run tool calls (sandboxed code) for the rollout workers (`places`:
    as create_group's).

    Called before any other actor: where the sandbox cannot be built (tools.sandbox=bwrap), this
    raises with what is missing and how to fix it, before a model is loaded anywhere. `wait=False`
    (an elastic pool's added worker) returns at once: the worker's start fails if they do.
    """
    if not uses_tool_executors(cfg):
        return []
    tl = cfg.tools
    if tl.sandbox == "none":
        warnings.warn(
            "tools.sandbox=none: model-written code runs WITHOUT A SANDBOX on the tool executors' machines",
            RuntimeWarning,
            stacklevel=2,
        )
    from relay.tools.registry import ToolRegistry

    registry = ToolRegistry([resolve_dotted(f) for f in tl.functions])
    executors = create_group(
        ToolExecutor,
        "tools",
        actor_roles(cfg)["tools"],  # follow_rollout: the count per worker times the workers
        run_name,
        lambda i: (tl.sandbox_limits, tl.sandbox, registry, tl.max_workers, i),
        groups,
        max_restarts=cfg.resources.max_restarts,
        places=places,
    )
    if not wait:
        return executors
    try:
        ray.get([ex.sandbox_mode.remote() for ex in executors])
    except ray.exceptions.RayActorError as e:
        cause = str(e)
        marker = "SandboxUnavailable: "
        reason = cause[cause.rindex(marker) + len(marker) :].strip().splitlines()[0] if marker in cause else cause
        raise RuntimeError(f"the tool executors could not start: {reason}") from None
    return executors


@dataclass
class Actors:
    rollout: list
    env: list
    learner: object
    reference: object | None
    tools: list = field(default_factory=list)  # ToolExecutors (tools.enabled without tools.server_url)
    critic: object | None = None
    reward_model: RewardModelPool | None = None  # reward_model.path: RewardModel actors (actors/reward_model.py)
    rollout_sleeps: bool = False  # engines sleep while the learner trains (rollout.sleep_while_training)
    weight_broadcast: BroadcastGroup | None = None  # weights reach the rollout workers by collective broadcast
    shared_weights: list = field(default_factory=list)  # per rollout worker: reads weights from shared memory
    rollout_args: object = None  # worker i's constructor arguments: an elastic pool starts more (relay_trainer/elastic.py)
    colocated: bool = False  # resources.colocate: learner and rollout[0] are one ColocatedWorker
    weight_lane: bool = False  # rollout.partial: weight calls run on the workers' "weights" lane (relay_trainer/weights.py)
    placement_groups: list = field(default_factory=list)
    faults: Supervisor = field(default_factory=lambda: Supervisor(600.0))  # deadlines, retries, fault counts
    recovery: LearnerRecovery | NoRecovery = field(default_factory=NoRecovery)  # set by the loop: learner_recovery.py

    def by_role(self) -> dict[str, list]:
        reference = None if isinstance(self.reference, LearnerAsReference) else self.reference  # no actor of its own
        single = {"learner": self.learner, "reference": reference, "critic": self.critic}
        roles = {
            "tools": self.tools,
            "env": self.env,
            "rollout": [] if self.colocated else self.rollout,  # colocated: the learner is the one worker
            **{r: h.ranks if isinstance(h, RankGroup) else [h] for r, h in single.items() if h is not None},
            "reward_model": self.reward_model.handles if self.reward_model else [],
        }
        return {role: handles for role, handles in roles.items() if handles}

    def handles(self) -> list:
        return [h for handles in self.by_role().values() for h in handles]


@contextmanager
def actor_pools(cfg: Config, model_path: str, run_name: str):
    """Create every role's actors on its placement group; kill them and free the groups on exit,
    so one Ray session can hold several runs (tests, Tune trials)."""
    res, groups, roles = cfg.resources, [], actor_roles(cfg)
    policy = PolicySettings.of(cfg)  # what the learner and the reference read of the config
    actors = Actors(rollout=[], env=[], learner=None, reference=None, placement_groups=groups)
    actors.faults = Supervisor(res.call_timeout_s, res.rollout_timeout_s, update_timeout_s=res.update_timeout_s)
    restarts = res.max_restarts  # a restarted worker rejoins a broadcast group formed again (relay_trainer/weights.py)
    try:
        places = worker_places(cfg, run_name, groups)  # roles that follow their rollout worker: its group
        # first: a sandbox that cannot be built stops here
        actors.tools = create_tool_executors(cfg, run_name, groups, places.get("tools"))
        if "env" in roles:
            env_args = lambda i: (cfg.task, i)  # noqa: E731
            where = places.get("env")
            actors.env = create_group(EnvPool, "env", roles["env"], run_name, env_args, groups, restarts, places=where)
        # Rollout workers look their EnvPool and executors up by name: an actor handle among a restartable
        # actor's arguments puts them in the object store, where a restart may not find them (Ray logs an error).
        names = {r: [actor_name(run_name, r, i) for i in range(len(getattr(actors, r)))] for r in ("env", "tools")}
        pool_of, tools_of = worker_links(cfg, names, lambda role, i: actor_name(run_name, role, i))
        token = run_token(cfg)  # one bearer token for every endpoint of the run, restarts included
        if res.colocate:  # restarted and restored as a learner is
            colocated = ColocatedSettings.of(cfg)  # what the learner and the rollout worker read of the config
            make_args = lambda i: (colocated, model_path, threads(cfg, res.learner), pool_of(0), tools_of(0), token)  # noqa: E731
            lives = res.learner_restores
            actors.learner = create_group(ColocatedWorker, "learner", res.learner, run_name, make_args, groups, lives)[
                0
            ]
            actors.rollout, actors.colocated = [actors.learner], True
        else:
            rollout = RolloutSettings.of(cfg)  # what a rollout worker reads of the config
            workers = roles["rollout"]  # resources.rollout, a range's count replaced by its min
            per_worker = threads(cfg, workers)
            actors.rollout_args = lambda i: (rollout, model_path, i, per_worker, pool_of(i), tools_of(i), token)
            actors.rollout = create_group(
                RolloutWorker,
                "rollout",
                workers,
                run_name,
                actors.rollout_args,
                groups,
                restarts,
                # rollout.partial: weight calls get a lane of their own, so they reach a worker mid-rollout
                concurrency_groups={WEIGHT_LANE: 1} if cfg.rollout.partial else None,
                places=places.get("rollout"),
            )
            actors.weight_lane = cfg.rollout.partial
            actors.learner = create_role(Learner, "learner", policy, cfg, res.learner, run_name, model_path, groups)
        if "reference" in roles:
            actors.reference = create_role(
                Reference, "reference", policy, cfg, res.reference, run_name, model_path, groups
            )  # frozen: past a deadline it is killed to be restarted, its pass made again (relay_trainer/steps.py)
            actors.faults.restorable.update(rank._actor_id for rank in role_actors(actors.reference))
        elif cfg.algorithm.kl_coef > 0:  # LoRA: the learner's base model, adapters off
            actors.reference = LearnerAsReference(actors.learner)
        if "critic" in roles:
            critic = CriticSettings.of(cfg)
            actors.critic = create_role(Critic, "critic", critic, cfg, res.critic, run_name, model_path, groups)
        if "reward_model" in roles:
            rm_path, rm = reward_model_path(cfg.reward_model.path), res.reward_model
            handles = create_group(
                RewardModel,
                "reward_model",
                rm,
                run_name,
                lambda i: (RewardModelSettings.of(cfg), rm_path, i, threads(cfg, rm)),
                groups,
                restarts,
            )
            actors.reward_model = RewardModelPool(RewardPoolSettings.of(cfg), handles, actors.faults)
        sleep = cfg.rollout.sleep_while_training
        colocated = 0 < res.rollout.gpus < 1 and 0 < res.learner.gpus < 1  # may share one GPU
        actors.rollout_sleeps = colocated if sleep is None else sleep
        roles = ", ".join(f"{role} x{len(handles)}" for role, handles in actors.by_role().items())
        actors.faults.names = {
            h._actor_id: f"{run_name}/{r}-{i}" for r, hs in actors.by_role().items() for i, h in enumerate(hs)
        }
        with phase(f"starting actors and loading the model ({roles})"):
            wait_placed(groups, res.placement_timeout_s)  # every role placed, or one line saying what is not
            ray.get([h.__ray_ready__.remote() for h in actors.handles()])  # constructors done: a failing one raises
        for role in ("learner", "reference", "critic"):
            if isinstance(handle := getattr(actors, role), RankGroup):
                with phase(f"forming the {role} rank group ({len(handle.ranks)} ranks, FSDP2)"):
                    handle.join(rank_backend(getattr(res, role)))
        # Colocated: one module, nothing to send (sync_weights only bumps the version).
        if uses_broadcast(res) and not actors.colocated:
            actors.weight_broadcast = BroadcastGroup(broadcast_backend(res), run_name)
            actors.weight_broadcast.form(actors.learner, actors.rollout)
        elif not actors.colocated:
            actors.shared_weights = open_shared_memory(actors.learner, actors.rollout, tag=run_name)
        yield actors
    finally:
        for handle in actors.handles():
            ray.kill(handle)
        for pg in groups:
            ray.util.remove_placement_group(pg)
