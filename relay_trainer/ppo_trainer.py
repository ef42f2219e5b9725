"""RayPPOTrainer: relay's loop driven from Python, the way PPO trainers elsewhere are.

    config = ConfigStore(); config.model.model_name = "tiny"; config.training.learning_rate = 1e-5
    env = MyEnvironment(config.environment)
    trainer = RayPPOTrainer(config=config, environment=env, reward_fn=compute_reward, dataset=None)
    trainer.fit(num_epochs=10)
    trainer.save_checkpoint(Path("checkpoints/epoch_10")); trainer.cleanup()

It holds no loop of its own: fit() calls relay_trainer.loop.train, the function `python driver.py`
runs, on the same actors, and the run lands in run.output_dir/run.name as a driver run does. The
actors live for one fit(); a later fit() resumes the run from its last checkpoint (the loop's
--resume: optimizer, data position and RNG included), so fit(2) then fit(3) trains as fit(5).

An environment instance stands for its class: relay builds fresh instances in its actors, one per
episode group, with the instance's config (task.env_config). The environment class and the reward
function reach the actors pickled by value (their module's code travels with them), so they need
not be importable where the actors run: defined in a script, a notebook or a test module alike.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from relay.api.config_store import ConfigStore
from relay.checkpoint.atomic import latest_checkpoint
from relay.checkpoint.manifest import verify_checkpoint
from relay.config import Config, ConfigError
from relay.run import metric_keys as keys
from relay.run.folder import run_folder
from relay_trainer.loop import train


class RayPPOTrainer:
    def __init__(
        self,
        config: ConfigStore | str | Path | Mapping[str, Any] | None = None,
        environment: Any = None,
        reward_fn: Any = None,
        dataset: str | Path | Iterable[Mapping[str, Any]] | None = None,
    ):
        """config: a ConfigStore, a config file or shipped config's name, or a mapping of sections
        (None: the default run's config, as ConfigStore()).
        environment: an environment instance or class (the reset/step contract), or None.
        reward_fn: f(trajectory) or f(trajectory, environment) -> float; None: the episode's return
        with an environment, else the task's own check. dataset: rows (mappings with a prompt and a
        ground_truth) or a JSONL / Parquet file; None: the environment's episodes or the built-in task."""
        self.config = (
            config if isinstance(config, ConfigStore) else ConfigStore("default" if config is None else config)
        )
        self.environment = environment
        self.reward_fn = reward_fn
        self.dataset = dataset
        self.metrics_history: list[dict[str, Any]] = []
        self.run_dir: Path | None = None  # set by the first fit() (or load_checkpoint)
        self.last_summary: dict[str, Any] | None = None  # fit()'s: reward and held-out results
        self.steps_done = 0
        self._epochs_done = 0
        self._rows_folder: str | None = None
        self._started_ray = False

    # ------------------------------------------------------------------ training

    def fit(self, num_epochs: int | None = None, num_iters_per_epoch: int | None = None) -> dict[str, Any]:
        """Train num_epochs x num_iters_per_epoch RL steps more; returns the run's summary.

        num_epochs defaults to config.training.num_epochs; with neither, one epoch of training.steps.
        An epoch is one pass over the dataset's rows (prompts_per_step per step), or, without a
        dataset, one step, unless num_iters_per_epoch says otherwise. Raises ConfigError listing
        every problem of the config before any actor starts."""
        base = self._config({})  # every problem at once, before anything starts
        epochs = num_epochs if num_epochs is not None else self.config.training.num_epochs
        if epochs is None:
            epochs, per_epoch = 1, num_iters_per_epoch or base.training.steps
        else:
            per_epoch = num_iters_per_epoch or self._iters_per_epoch(base)
        problems = [
            f"fit: {name} must be a positive integer, got {value!r}"
            for name, value in (("num_epochs", epochs), ("num_iters_per_epoch", per_epoch))
            if not (isinstance(value, int) and not isinstance(value, bool) and value > 0)
        ]
        if problems:
            raise ConfigError(problems)
        extra = {"training.steps": self.steps_done + epochs * per_epoch}
        if (every := self.config.checkpoint_every(per_epoch)) is not None:
            extra["checkpoint.every"] = every
        resume = self.run_dir is not None
        if resume:
            extra["run.name"], extra["run.output_dir"] = self.run_dir.name, str(self.run_dir.parent)
        cfg = self._config(extra)
        if not resume:
            self.run_dir = run_folder(cfg.run, resume=False)
            cfg = self._config({**extra, "run.name": self.run_dir.name})
        self._note_ray()
        self._ship_user_code()
        first_epoch = self._epochs_done

        def report(step: int, metrics: dict[str, Any]) -> None:
            epoch = first_epoch + (step - self.steps_done - 1) // per_epoch + 1
            self.metrics_history.append(
                {
                    **metrics,
                    "step": step,
                    "epoch": epoch,
                    "policy_loss": metrics.get(keys.POLICY_LOSS),
                    "value_loss": metrics.get("critic/vf_loss"),
                    "reward": metrics.get(keys.REWARD_MEAN),
                }
            )

        try:
            self.last_summary = train(cfg, resume=resume, report=report)
        except BaseException:
            if not resume and latest_checkpoint(self.run_dir / "checkpoints") is None:
                self.run_dir = None  # nothing to go on from: the next fit() starts a fresh run
            raise
        self.steps_done, self._epochs_done = cfg.training.steps, first_epoch + epochs
        return self.last_summary

    def train(self) -> dict[str, Any]:
        """fit() with the config's epochs (TRL's name for it)."""
        return self.fit()

    def _config(self, extra: dict[str, Any]) -> Config:
        """The run's typed config: the store's keys, then the trainer's arguments, then `extra`."""
        args: dict[str, Any] = {}
        env = self.environment
        if env is not None:
            cls = env if isinstance(env, type) else type(env)
            args["task.env"] = cls
            own = getattr(env, "config", None) if not isinstance(env, type) else None
            if isinstance(own, Mapping) and own:  # the instance's config stands for the class's episodes
                args["task.env_config"] = dict(own)
        if self.reward_fn is not None:
            args["task.reward_fn"] = self.reward_fn
        if self.dataset is not None:
            args["task.train_file"] = self._dataset_file()
        if env is not None or self.dataset is not None:
            args["task.name"] = "custom"
        return self.config.build({**args, **extra})

    def _dataset_file(self) -> str:
        if isinstance(self.dataset, (str, Path)):
            return str(self.dataset)
        if self._rows_folder is None:  # rows given in memory: written once as JSONL for the loop to read
            self._rows_folder = tempfile.mkdtemp(prefix="relay-rows-")
            rows = [dict(row) for row in self.dataset]
            with open(Path(self._rows_folder) / "train.jsonl", "w") as f:
                f.writelines(json.dumps(row, default=str) + "\n" for row in rows)
        return str(Path(self._rows_folder) / "train.jsonl")

    def _iters_per_epoch(self, cfg: Config) -> int:
        if self.dataset is None:
            return 1
        from relay.run.rows import task_rows

        return max(1, len(task_rows(cfg.task, cfg.tools, cfg.run.seed)[0]) // cfg.training.prompts_per_step)

    def _ship_user_code(self) -> None:
        """Pickle the user's environment and reward modules by value. Ray's workers import a module
        by name otherwise, and a script's folder, a notebook's or a test's is not on their path."""
        import sys

        import ray.cloudpickle

        env = self.environment
        for obj in (env if env is None or isinstance(env, type) else type(env), self.reward_fn):
            name = getattr(obj, "__module__", None)
            top = (name or "").split(".")[0]
            if name and name != "__main__" and top not in ("relay", "actors", "relay_trainer") and name in sys.modules:
                ray.cloudpickle.register_pickle_by_value(sys.modules[name])

    def _note_ray(self) -> None:
        """Whether this trainer's fit starts Ray (then cleanup() stops it)."""
        import ray

        self._started_ray = self._started_ray or not ray.is_initialized()

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(self, path: str | Path) -> Path:
        """Copy the run's latest checkpoint (policy, optimizer, critic, data position, RNG) to `path`,
        verified first; an earlier checkpoint at `path` is replaced."""
        source = latest_checkpoint(self.run_dir / "checkpoints") if self.run_dir is not None else None
        if source is None:
            raise ConfigError(["save_checkpoint: nothing trained yet; call fit() first"])
        verify_checkpoint(source)
        path = Path(path).expanduser()
        if path.exists() and not (path / "manifest.json").is_file():
            raise ConfigError([f"save_checkpoint: {path} exists and is not a relay checkpoint; choose another path"])
        tmp = path.with_name(f".tmp-{path.name}")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp)
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
        return path

    def load_checkpoint(self, path: str | Path) -> int:
        """Verify the checkpoint at `path` and make the next fit() continue from it, in a fresh run
        folder; returns the step it holds."""
        path = Path(path).expanduser()
        if not (path / "manifest.json").is_file():
            raise ConfigError([f"load_checkpoint: {path} is not a relay checkpoint (no manifest.json)"])
        manifest = verify_checkpoint(path)
        step = int(manifest["step"])
        cfg = self._config({})
        self.run_dir = run_folder(cfg.run, resume=False)
        checkpoints = self.run_dir / "checkpoints"
        checkpoints.mkdir(parents=True, exist_ok=True)
        shutil.copytree(path, checkpoints / f"step_{step:08d}")
        self.steps_done = step
        self._epochs_done = max((m["epoch"] for m in self.metrics_history if m["step"] <= step), default=0)
        return step

    # ------------------------------------------------------------------ the end

    def cleanup(self) -> None:
        """Kill any actor of this trainer's runs still alive, and stop Ray if fit() started it."""
        import ray

        if ray.is_initialized() and self.run_dir is not None:
            from relay_trainer.pools import NAMESPACE

            for entry in ray.util.list_named_actors(all_namespaces=True):
                if entry["namespace"] == NAMESPACE and entry["name"].startswith(f"{self.run_dir.name}/"):
                    try:
                        ray.kill(ray.get_actor(entry["name"], namespace=NAMESPACE))
                    except ValueError:  # gone between the listing and the kill
                        pass
        if self._started_ray and ray.is_initialized():
            ray.shutdown()
        self._started_ray = False
        if self._rows_folder is not None:
            shutil.rmtree(self._rows_folder, ignore_errors=True)
            self._rows_folder = None
