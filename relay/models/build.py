"""Rebuild the shipped models from code: `python -m relay.models.build [--all] [--out DIR]`.

One thread, fixed seeds, fixed step counts: the same machine rebuilds the same bits. Another
machine (other float kernels) builds other bits: the base's held-out arithmetic comes out within 5
points (the slow tier checks it), but a task's warm start can differ more (tiny-math_tool's copy of
a tool's result forms on some builds and not on others), so runs and tests load the shipped files,
never a rebuild. Writes each folder and its entry in the folder's manifest.json.

`--task tiny-math_tool` rebuilds one task's warm start from the shipped base, leaving the base as is.
`--env my_pkg.envs:MyEnv --out DIR` warm-starts the tiny model on a user's own environment class
(one with `warm_start_episodes(n, seed)`), for `model.path=DIR`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch
import transformers

from relay.config import resolve_dotted
from relay.envs.arithmetic import make_rows
from relay.models.shipped import BASE, MANIFEST, SHIPPED_DIR, TASK_MODELS, file_sha256
from relay.models.tiny import TinySpec, build_tiny_model, greedy_accuracy
from relay.models.warm_start import warm_start

HELD_OUT_SEED = 2_000_003  # rows the tiny recipe never trains on
transformers.utils.logging.disable_progress_bar()  # no 'Writing model shards' bar per folder


def save_folder(model, tokenizer, folder: Path) -> dict[str, str]:
    """Write the model to `folder` (replacing it whole); {file name: sha256}."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(folder, ignore_errors=True)
    os.rename(tmp, folder)
    return {p.name: file_sha256(p) for p in sorted(folder.iterdir()) if p.is_file()}


def record(out: Path, name: str, entry: dict) -> None:
    manifest_path = out / MANIFEST.name
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest[name] = entry
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def build_base(out: Path, spec: TinySpec = TinySpec()) -> dict:
    start = time.perf_counter()
    model, tokenizer = build_tiny_model(spec)
    accuracy, well_formed = greedy_accuracy(model, tokenizer, make_rows(256, HELD_OUT_SEED, spec.digits))
    files = save_folder(model, tokenizer, out / BASE)
    entry = {
        "recipe": {"builder": "relay.models.tiny", **asdict(spec)},
        "files": files,
        "held_out_accuracy": accuracy,
        "well_formed": well_formed,
    }
    record(out, BASE, entry)
    print(
        f"build: {out / BASE} in {time.perf_counter() - start:.0f} s; held-out greedy accuracy {accuracy:.3f}",
        flush=True,
    )
    return entry


def build_task(out: Path, name: str, env: str, base: Path) -> dict:
    start = time.perf_counter()
    env_cls = resolve_dotted(env)
    model, tokenizer = warm_start(base, env_cls)
    files = save_folder(model, tokenizer, out / name)
    steps = getattr(env_cls, "warm_start_steps", None)
    entry = {
        "recipe": {"builder": "relay.models.warm_start", "env": env, "base": base.name, "steps": steps},
        "files": files,
    }
    record(out, name, entry)
    print(f"build: {out / name} in {time.perf_counter() - start:.0f} s", flush=True)
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--all", action="store_true", help="also the built-in agent tasks' warm starts")
    parser.add_argument("--out", type=Path, default=SHIPPED_DIR, help=f"folder to write (default: {SHIPPED_DIR})")
    parser.add_argument(
        "--task", choices=sorted(TASK_MODELS), help="rebuild one task's warm start from the shipped base and record it"
    )
    parser.add_argument(
        "--env", help="warm-start the shipped tiny model on this environment class (dotted path) into --out"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # one reduction order: rebuilds on one machine are bit-identical
    torch.use_deterministic_algorithms(True)
    if args.env:
        from relay.models.shipped import shipped_model

        env_cls = resolve_dotted(args.env)
        if not hasattr(env_cls, "warm_start_episodes"):
            print(f"--env {args.env}: the class has no warm_start_episodes(n, seed) to learn from", file=sys.stderr)
            return 2
        model, tokenizer = warm_start(shipped_model(BASE), env_cls)
        save_folder(model, tokenizer, args.out)
        print(f"build: {args.out} (use it with model.path={args.out})")
        return 0
    if args.task:  # the base stays as shipped: a rebuilt base differs across machines
        from relay.models.shipped import shipped_model

        build_task(args.out, args.task, TASK_MODELS[args.task], shipped_model(BASE))
        return 0
    build_base(args.out)
    if args.all:
        for name, env in TASK_MODELS.items():
            build_task(args.out, name, env, args.out / BASE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
