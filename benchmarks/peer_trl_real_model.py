"""relay against TRL's GRPOTrainer on a real pretrained model: configs/smol_arith.yaml's setting.

    python benchmarks/peer_trl_real_model.py                       # seeds 0 1 2, every contender
    python benchmarks/peer_trl_real_model.py --seeds 0 --only trl,relay-hf
    python benchmarks/peer_trl_real_model.py --only trl,trl-bf16,relay-hf,relay-hf-bf16

The setting is the recipe's, for every contender: SmolLM2-135M-Instruct (the folder relay converts
from the packaged GGUF file), chat_arithmetic's rows for the seed in the order relay's
PromptIterator draws them (TRL reads them as written, shuffling off), 4 prompts x 8 samples a
step, 16 new tokens, temperature 1.0, lr 1e-5 constant, AdamW without weight decay, gradient
clipping at 1.0, no KL term, the token-mean loss, float32, no gradient checkpointing, 12 steps.
A `-bf16` contender keeps float32 master weights and optimizer state and runs its forward passes
under bf16 autocast: TRL's `bf16=True`, relay's `training.mixed_precision=bf16` with the engine
holding bf16 weights (`model.dtype=bfloat16`). The evaluator reads every final model in float32.
The reward is the recipe's (the last integer of the answer equals the result). Every contender
may use every core: relay's actors take all of them in the phase that runs (relay_trainer/pools.py
threads), TRL's one process gets `torch.set_num_threads(cpu_count)` and the niceness Ray gives
its workers (15 above the driver's), so other work on the machine slows both alike.

Each run is a fresh child process; the contenders alternate (the order rotates with the seed).
Measured per run: seconds per step (mean over steps 2..N, from each step's end), launch to the end
of the first step, peak memory over the whole process tree (Ray's processes included) as the PSS
sum (what the machine holds), and greedy held-out accuracy on the recipe's 256 held-out problems,
read by one evaluator for everybody (the same greedy decoding relay's own evaluation does). relay
runs also report their engine's tokens/s and the engine-vs-learner logprob gap at the first and the
last step. Numbers, never assertions. TRL comes from benchmarks/peer_trl.py's .venv-trl.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "smol_arith.yaml"
CACHE = REPO / ".cache" / "peer_trl_real_model"
STEPS: list[int] = []  # --steps N: runs shorter than the recipe's
OVERRIDES: list[str] = []  # --set KEY=VALUE: the recipe changed for every contender
RAY_WORKER_NICENESS = 15  # Ray starts its worker processes (relay's actors) this much nicer than the driver
CONTENDERS = {
    "trl": "TRL",
    "trl-bf16": "TRL, bf16",
    "relay-hf": "relay, HF engine",
    "relay-hf-bf16": "relay, HF engine, bf16",
    "relay-vllm": "relay, vLLM-CPU engine",
}
BF16 = "-bf16"  # a contender's suffix: bf16 autocast over float32 master weights (TRL: bf16=True)

sys.path.insert(0, str(REPO))


def recipe(seed: int, extra: list[str] = ()):
    from relay.config import load_config

    steps = [f"training.steps={n}" for n in STEPS]
    return load_config(str(CONFIG), [f"run.seed={seed}", *steps, *OVERRIDES, *extra])


def model_folder() -> Path:
    """The recipe's model as relay loads it: the folder converted once from the GGUF file."""
    from relay.run.model_source import resolve_model_path

    cfg = recipe(0)
    return Path(resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model))


def write_rows(seed: int) -> tuple[Path, list[dict]]:
    """The rows TRL trains on (relay's draw order for the seed) as a file, and the held-out rows."""
    from relay.envs.data import PromptIterator
    from relay.run.rows import task_rows

    cfg = recipe(seed)
    train_rows, held_out = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    order = PromptIterator(train_rows, seed).take(cfg.training.steps * cfg.training.prompts_per_step)
    path = CACHE / f"order-seed{seed}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in order))
    return path, held_out


def held_out_accuracy(model_dir: Path, rows: list[dict], max_new_tokens: int, batch: int = 64) -> float:
    """The one evaluator: greedy answers in the model's chat template, the recipe's reward."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from relay.envs.chat_arithmetic import final_integer

    torch.set_num_threads(os.cpu_count() or 1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    right = 0
    for i in range(0, len(rows), batch):
        chunk = rows[i : i + batch]
        texts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True
            )
            for r in chunk
        ]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )
        answers = tokenizer.batch_decode(out[:, enc.input_ids.shape[1] :], skip_special_tokens=True)
        right += sum(final_integer(a) == r["ground_truth"] for a, r in zip(answers, chunk))
    return right / len(rows)


# ------------------------------------------------------------------------------ the contenders (child processes)


def run_relay(a, work: Path, on_step) -> Path:
    from relay_trainer import loop

    engine = a.child.removeprefix("relay-").removesuffix(BF16)
    bf16 = ["training.mixed_precision=bf16", "model.dtype=bfloat16"] if a.child.endswith(BF16) else []
    cfg = recipe(a.seed, [
        f"run.output_dir={work}", "run.name=relay", f"rollout.engine={engine}", "training.eval_before=false",
        "checkpoint.save_hf_model=true", "logging.console=false", *bf16,
    ])  # fmt: skip
    seen: list[dict] = []

    def report(step, metrics):
        on_step()
        seen.append({k: metrics.get(k) for k in ENGINE_KEYS})

    loop.train(cfg, report=report)
    (work / "engine.json").write_text(json.dumps(seen))
    return work / "relay" / "final_model"


ENGINE_KEYS = (
    "rollout/tokens_per_s",
    "rollout/logprob_diff_max",
    "rollout/logprob_diff_mean",
    "time/rollout_s",
    "time/update_s",
)


def run_trl(a, work: Path, on_step) -> Path:
    sys.modules["vllm"] = None  # TRL generates with transformers on a CPU; importing vLLM only costs start-up
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from relay.envs.chat_arithmetic import final_integer

    torch.set_num_threads(os.cpu_count() or 1)
    os.nice(RAY_WORKER_NICENESS)  # the priority relay's actors run at: equal footing on a machine doing other work
    cfg = recipe(a.seed)
    t, r = cfg.training, cfg.rollout

    def exact_answer(prompts, completions, ground_truth, **_):
        return [1.0 if final_integer(c[-1]["content"]) == g else 0.0 for c, g in zip(completions, ground_truth)]

    class StepEnds(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            on_step()

    rows = [json.loads(line) for line in Path(a.rows).open()]
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": x["prompt"]}], "ground_truth": x["ground_truth"]} for x in rows]
    )
    config = GRPOConfig(
        output_dir=str(work / "trl"), use_cpu=True, seed=a.seed, max_steps=t.steps, learning_rate=t.lr,
        lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=1.0,
        per_device_train_batch_size=t.prompts_per_step * r.n, num_generations=r.n,
        max_completion_length=r.max_new_tokens, temperature=r.temperature, top_p=1.0, top_k=0, beta=0.0,
        loss_type="dapo",  # token-mean over the batch, relay's algorithm.loss_agg
        bf16=a.child.endswith(BF16), gradient_checkpointing=False, shuffle_dataset=False, report_to="none",
        save_strategy="no", logging_steps=10**6, disable_tqdm=True, dataloader_num_workers=0,
    )  # fmt: skip
    folder = a.model
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32, attn_implementation=cfg.model.attn_implementation
        ),
        processing_class=AutoTokenizer.from_pretrained(folder, padding_side="left"),
        reward_funcs=exact_answer, args=config, train_dataset=dataset, callbacks=[StepEnds()],
    )  # fmt: skip
    trainer.train()
    trainer.save_model(str(work / "trl" / "final_model"))
    return work / "trl" / "final_model"


def child(a) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    steps_done: list[float] = []
    work = Path(a.work)
    final = (run_trl if a.child.startswith("trl") else run_relay)(a, work, lambda: steps_done.append(time.time()))
    (work / "result.json").write_text(json.dumps({"steps_done": steps_done, "final_model": str(final)}))


# ------------------------------------------------------------------------------ the parent


def one_run(python: str, contender: str, seed: int, model: Path, rows: Path, held_out: list[dict], tokens: int) -> dict:
    from benchmarks.process_memory import PeakTreeMemory

    work = Path(tempfile.mkdtemp(prefix=f"{contender}-s{seed}-", dir=CACHE))
    cmd = [python, str(Path(__file__).resolve()), "--child", contender, "--work", str(work)]
    cmd += ["--model", str(model), "--rows", str(rows), "--seed", str(seed)]
    cmd += [f"--steps={n}" for n in STEPS] + [f"--set={o}" for o in OVERRIDES]
    launched = time.time()
    with (work / "log.txt").open("w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        with PeakTreeMemory(proc.pid, every_s=2.0) as peak:  # a sample reads every process's smaps: not free
            code = proc.wait()
    if code != 0:
        tail = (work / "log.txt").read_text().strip().splitlines()[-15:]
        raise SystemExit(f"{contender} seed {seed} failed ({code}); {work / 'log.txt'}:\n" + "\n".join(tail))
    result = json.loads((work / "result.json").read_text())
    done = result["steps_done"]
    measured = {
        "s_per_step": (done[-1] - done[0]) / max(len(done) - 1, 1),
        "first_step_s": done[0] - launched,
        "wall_s": time.time() - launched,
        "peak_pss_gb": peak.pss / 1e9,
        "accuracy": held_out_accuracy(Path(result["final_model"]), held_out, tokens),
    }
    if (work / "engine.json").exists():
        steps = json.loads((work / "engine.json").read_text())
        measured["tokens_per_s"] = statistics.median(s["rollout/tokens_per_s"] for s in steps)
        measured["rollout_s"] = statistics.median(s["time/rollout_s"] for s in steps)
        measured["update_s"] = statistics.median(s["time/update_s"] for s in steps)
        for when, s in (("first", steps[0]), ("last", steps[-1])):
            measured[f"diff_max_{when}"] = s["rollout/logprob_diff_max"]
            measured[f"diff_mean_{when}"] = s["rollout/logprob_diff_mean"]
    shutil.rmtree(work, ignore_errors=True)  # a failed run's folder stays, with its log
    return measured


def table(results: dict[str, list[dict]], steps: int) -> str:
    trl = results.get("trl", [])

    def mean(rows, key, agg=statistics.median):
        values = [r[key] for r in rows if r.get(key) is not None]
        return agg(values) if values else None

    lines = ["| | " + " | ".join(CONTENDERS[c] for c in results) + " |", "|---|" + "---|" * len(results)]
    for label, key, agg, fmt, ratio in (
        ("seconds per step (median over seeds)", "s_per_step", statistics.median, "{:.1f}", True),
        ("launch to the end of step 1 (s)", "first_step_s", statistics.median, "{:.0f}", True),
        ("peak memory, PSS sum over all processes (GB)", "peak_pss_gb", max, "{:.2f}", True),
        (f"held-out accuracy after {steps} steps (mean over seeds)", "accuracy", statistics.fmean, "{:.3f}", False),
    ):
        base = mean(trl, key, agg)
        cells = []
        for c, rows in results.items():
            v = mean(rows, key, agg)
            cell = "n/a" if v is None else fmt.format(v)
            if ratio and base and v is not None and c != "trl":
                cell += f" ({v / base:.2f}x)"
            cells.append(cell)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, help="training steps per run (default: the recipe's)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="change the recipe for every contender")
    ap.add_argument("--only", help=f"comma-separated contenders of {', '.join(CONTENDERS)} (default: all)")
    ap.add_argument("--child", choices=list(CONTENDERS), help=argparse.SUPPRESS)
    for name in ("--work", "--model", "--rows"):
        ap.add_argument(name, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.steps:
        STEPS.append(a.steps)
    OVERRIDES.extend(a.set)
    if a.child:
        child(a)
        return 0
    from benchmarks.peer_trl import trl_python

    wanted = list(CONTENDERS) if a.only is None else [c.strip() for c in a.only.split(",")]
    if unknown := [c for c in wanted if c not in CONTENDERS]:
        ap.error(f"--only: unknown contender(s) {unknown}; choose from {', '.join(CONTENDERS)}")
    pythons = {c: sys.executable for c in wanted if not c.startswith("trl")}
    if any(c.startswith("trl") for c in wanted):
        python, why = trl_python()
        if python is None:
            print(f"peer_trl_real_model: TRL is not available, running relay alone: {why}", flush=True)
        else:
            pythons.update({c: python for c in wanted if c.startswith("trl")})
    contenders = [c for c in CONTENDERS if c in pythons]
    cfg = recipe(0)
    model, tokens = model_folder(), cfg.rollout.max_new_tokens
    results: dict[str, list[dict]] = {c: [] for c in contenders}
    for i, seed in enumerate(a.seeds):
        rows, held_out = write_rows(seed)
        print(
            f"seed {seed}: held-out accuracy before training {held_out_accuracy(model, held_out, tokens):.3f}",
            flush=True,
        )
        shift = i % len(contenders)
        for contender in contenders[shift:] + contenders[:shift]:
            m = one_run(pythons[contender], contender, seed, model, rows, held_out, tokens)
            results[contender].append(m)
            print(f"seed {seed} {contender}: {json.dumps({k: float(f'{v:.4g}') for k, v in m.items()})}", flush=True)
    print(f"\n{os.cpu_count()} CPUs, {cfg.training.steps} steps per run, seeds {a.seeds}\n")
    print(table(results, cfg.training.steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
