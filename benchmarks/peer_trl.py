"""relay against Hugging Face TRL's GRPOTrainer (one process) on one identical setting.

    python benchmarks/peer_trl.py                      # 20 steps, 2x8 and 8x8, one round
    python benchmarks/peer_trl.py --steps 100 --rounds 4
    python benchmarks/peer_trl.py --only trl,relay --steps 30

Two relay layouts: `relay`, the default (here colocated: one actor is both learner and rollout
worker and generates from the trained module), and `relay-separate` (resources.colocate=false:
a learner actor and a rollout worker actor).

The setting: a ~1M-parameter Qwen2 model built by relay's own code (relay.models.tiny, byte-level
tokenizer, no chat template) and warm-started here on plain prompts "A+B=" (A, B in 0..9; 20 of
the 100 held out); P prompts x 8 samples per step, 8 new tokens, temperature 1, lr 3e-5, no KL,
one torch thread per process, float32, no gradient checkpointing. Both contenders see the same
prompts in the same order (relay's PromptIterator order, given to TRL with its shuffling off), and
the same reward (the exact-sum check of relay.envs.arithmetic). One evaluator: greedy held-out accuracy.

Each run is a fresh child process of this script, and the contenders alternate (TRL first in even
rounds, relay first in odd ones; round r uses seed r). Measured per run: seconds per step (the
mean over steps 2..N), launch to the end of the first step (from just before the process starts),
and peak memory over the whole process tree, Ray's processes included, sampled every second: the
largest sum of resident memory (RSS, which counts shared pages once per process that maps them) and
of proportional set sizes (PSS: shared pages split between those processes; what the machine holds).
`benchmarks/peer_trl_compute.py` compares the two steps' compute alone, in one process, no Ray.

TRL comes from PyPI into its own virtual environment, .venv-trl/ (made on first run, beside this
repository's): it sees this environment's packages through a .pth file, TRL itself is installed
without dependencies and its missing ones under a constraint that keeps torch and transformers at
the versions installed here, so no other torch is ever fetched.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRL_VENV = REPO / ".venv-trl"
TRL_VERSION = "1.16.0"  # supports transformers >= 4.56.2, torch CPU builds
TRL_MISSING_DEPS = ["accelerate>=1.10.1", "datasets>=4.7.0", "pandas>=2.1.1", "pyarrow>=21.0.0", "psutil"]
CACHE = REPO / ".cache" / "peer_trl"
SAMPLES, NEW_TOKENS, LR, WARM_START_STEPS = 8, 8, 3e-5, 300

sys.path.insert(0, str(REPO))


# ------------------------------------------------------------------------------ the setting


def addition_rows() -> tuple[list[dict], list[dict]]:
    """(train rows, held-out rows): every "A+B=" with A, B in 0..9, 20 of them held out."""
    rows = [{"prompt": f"{a}+{b}=", "ground_truth": str(a + b)} for a in range(10) for b in range(10)]
    random.Random(0).shuffle(rows)
    return rows[20:], rows[:20]


def tiny_plain_model(train_rows: list[dict]) -> Path:
    """The tiny model, warm-started on plain prompts whose ones carry is dropped from most answers
    (as the shipped tiny model's recipe does), so GRPO has something to fix. Built once, cached."""
    folder = CACHE / f"model-plain-{WARM_START_STEPS}"
    if (folder / "config.json").exists():
        return folder
    import torch

    from relay.models.tiny import TinySpec, build_tiny_model

    torch.set_num_threads(1)
    model, tokenizer = build_tiny_model(TinySpec(warm_start_steps=0))
    tokenizer.chat_template = None  # a base model: plain text in, plain text out
    rng = random.Random(1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=2e-3, total_steps=WARM_START_STEPS, pct_start=0.05)
    model.train()
    for _ in range(WARM_START_STEPS):
        seqs, labels = [], []
        for row in rng.choices(train_rows, k=64):
            a, b = (int(x) for x in row["prompt"].rstrip("=").split("+"))
            answer = str(a + b - 10) if a + b >= 10 and rng.random() < 0.7 else row["ground_truth"]
            prompt = tokenizer(row["prompt"]).input_ids
            target = tokenizer(answer).input_ids + [tokenizer.eos_token_id]
            seqs.append(prompt + target)
            labels.append([-100] * len(prompt) + target)
        width = max(map(len, seqs))
        ids = torch.tensor([s + [tokenizer.pad_token_id] * (width - len(s)) for s in seqs])
        lab = torch.tensor([lb + [-100] * (width - len(lb)) for lb in labels])
        loss = model(input_ids=ids, attention_mask=(ids != tokenizer.pad_token_id).long(), labels=lab).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    model.eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def held_out_accuracy(model_dir: Path, rows: list[dict]) -> float:
    """The one evaluator: greedy answers to plain prompts, exact sums."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from relay.envs.arithmetic import parse_answer

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    prompts = [tokenizer(r["prompt"]).input_ids for r in rows]
    width = max(map(len, prompts))
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=(ids != tokenizer.pad_token_id).long(),
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    texts = tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    return sum(parse_answer(t) == r["ground_truth"] for t, r in zip(texts, rows)) / len(rows)


def write_data(sizes: list[int], steps: int, rounds: int) -> Path:
    """The rows as files both contenders read, and for each seed and size the prompt order relay's
    PromptIterator draws (TRL reads it as written). Returns the folder."""
    from relay.envs.data import PromptIterator

    train_rows, held_out = addition_rows()
    data = CACHE / "data"
    data.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train_rows), ("held_out", held_out)):
        (data / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for seed in range(rounds):
        for p in sizes:
            order = PromptIterator(train_rows, seed).take(steps * p)
            (data / f"order-seed{seed}-p{p}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in order))
    return data


# ------------------------------------------------------------------------------ the two contenders (child processes)


def relay_setting(model, data, prompts: int) -> list[str]:
    """relay's config keys for the setting (what TRL gets in trl_trainer)."""
    keys = [f"model.path={model}", "task.name=custom", "task.prompt_format=raw", f"training.lr={LR}"]
    keys += [f"task.train_file={data}/train.jsonl", f"task.eval_file={data}/held_out.jsonl"]
    return keys + [
        f"rollout.n={SAMPLES}",
        f"rollout.max_new_tokens={NEW_TOKENS}",
        f"training.prompts_per_step={prompts}",
    ]


def run_relay(a, work: Path, on_step: Callable[[], None], separate: bool = False) -> Path:
    from relay.config import load_config
    from relay_trainer import loop

    run = [f"run.output_dir={work}", "run.name=relay", f"run.seed={a.seed}", f"training.steps={a.steps}"]
    run += ["training.eval_before=false", "checkpoint.every=0", "checkpoint.save_hf_model=true"]
    run += ["logging.console=false"] + (["resources.colocate=false"] if separate else [])
    cfg = load_config(None, relay_setting(a.model, a.data, a.prompts) + run)
    loop.train(cfg, report=lambda step, metrics: on_step())
    return work / "relay" / "final_model"


def trl_trainer(model: str, data: Path, output_dir: Path, seed: int, steps: int, prompts: int, callback):
    """TRL's GRPOTrainer on the setting: seed `seed`'s prompt order, `prompts` x 8 samples a step."""
    sys.modules["vllm"] = None  # a CPU run generates with transformers; importing vLLM would only cost start-up
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from relay.envs.arithmetic import parse_answer

    def exact_sum(prompts, completions, ground_truth, **_):
        return [1.0 if parse_answer(c) == g else 0.0 for c, g in zip(completions, ground_truth)]

    rows = [json.loads(line) for line in (Path(data) / f"order-seed{seed}-p{prompts}.jsonl").open()]
    config = GRPOConfig(
        output_dir=str(output_dir),
        use_cpu=True,
        seed=seed,
        max_steps=steps,
        learning_rate=LR,
        per_device_train_batch_size=prompts * SAMPLES,  # completions per step
        num_generations=SAMPLES,
        max_completion_length=NEW_TOKENS,
        temperature=1.0,
        beta=0.0,
        # relay's setting, not TRL's defaults for large models: float32 (TRL: bf16 autocast) and no
        # gradient checkpointing (TRL: on, which also turns the KV cache off while generating).
        bf16=False,
        gradient_checkpointing=False,
        shuffle_dataset=False,  # relay's prompt order, as written
        report_to="none",
        save_strategy="no",
        logging_steps=10**6,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    return GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model),
        processing_class=AutoTokenizer.from_pretrained(model, padding_side="left"),
        reward_funcs=exact_sum,
        args=config,
        train_dataset=Dataset.from_list(rows),
        callbacks=[callback],
    )


def run_trl(a, work: Path, on_step: Callable[[], None]) -> Path:
    import torch
    from transformers import TrainerCallback

    torch.set_num_threads(1)

    class StepTimes(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            on_step()
            threads.append(torch.get_num_threads())  # nothing inside the trainer raised it

    threads: list[int] = []
    trainer = trl_trainer(a.model, Path(a.data), work / "trl", a.seed, a.steps, a.prompts, StepTimes())
    trainer.train()
    assert set(threads) == {1}, f"TRL ran with {set(threads)} torch threads"
    trainer.save_model(str(work / "trl" / "final_model"))
    return work / "trl" / "final_model"


def child(a) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    steps_done: list[float] = []
    work, on_step = Path(a.work), lambda: steps_done.append(time.time())
    if a.child == "trl":
        final = run_trl(a, work, on_step)
    else:
        final = run_relay(a, work, on_step, separate=a.child == "relay-separate")
    json.dump({"steps_done": steps_done, "final_model": str(final)}, open(work / "result.json", "w"))


# ------------------------------------------------------------------------------ the parent: set-up, runs, table


def trl_python() -> tuple[str | None, str]:
    """.venv-trl's python, made on first use; (None, why) when TRL cannot be installed or imported."""
    python = TRL_VENV / "bin" / "python"
    check = [str(python), "-c", "import sys; sys.modules['vllm'] = None; import trl; print(trl.__version__)"]
    if python.exists() and subprocess.run(check, capture_output=True, text=True).returncode == 0:
        return str(python), ""
    print(f"peer_trl: making {TRL_VENV} with trl=={TRL_VERSION} (once)", flush=True)
    import sysconfig

    import torch
    import transformers

    constraints = CACHE / "trl-constraints.txt"
    constraints.parent.mkdir(parents=True, exist_ok=True)
    constraints.write_text(f"torch=={torch.__version__}\ntransformers=={transformers.__version__}\n")
    steps = [
        [sys.executable, "-m", "venv", str(TRL_VENV)],
        [str(python), "-m", "pip", "install", "-q", "--no-deps", f"trl=={TRL_VERSION}"],
        [str(python), "-m", "pip", "install", "-q", "-c", str(constraints), *TRL_MISSING_DEPS],
    ]
    for i, cmd in enumerate(steps):
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            return None, f"{' '.join(cmd[:6])} failed: {done.stderr.strip().splitlines()[-1:]}"
        if i == 0:  # this environment's packages (torch, transformers, relay's deps) are seen, not copied
            site = subprocess.run(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                capture_output=True,
                text=True,
            ).stdout.strip()
            (Path(site) / "relay-main-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = subprocess.run(check, capture_output=True, text=True)
    return (str(python), "") if done.returncode == 0 else (None, f"import trl failed: {done.stderr.strip()[-300:]}")


def one_run(python: str, contender: str, prompts: int, a, data: Path, model: Path, seed: int, held_out) -> dict:
    from benchmarks.process_memory import PeakTreeMemory

    work = Path(tempfile.mkdtemp(prefix=f"peer-{contender}-", dir=CACHE))
    cmd = [python, str(Path(__file__).resolve()), "--child", contender, "--work", str(work), "--data", str(data)]
    cmd += ["--model", str(model), "--steps", str(a.steps), "--prompts", str(prompts), "--seed", str(seed)]
    log = (work / "log.txt").open("w")
    launched = time.time()
    env = dict(os.environ, OMP_NUM_THREADS="1")  # one torch thread per process, whatever a library decides
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
    # sampled every second: a sample reads every process's smaps, and at 0.1 s that slowed relay's
    # steps (a dozen processes, Ray's own among them) by a quarter and TRL's (one) far less
    with PeakTreeMemory(proc.pid, every_s=1.0) as peak:
        code = proc.wait()
    if code != 0:
        tail = (work / "log.txt").read_text().strip().splitlines()[-15:]
        raise RuntimeError(f"{contender} run failed ({code}); {work / 'log.txt'}:\n" + "\n".join(tail))
    result = json.loads((work / "result.json").read_text())
    done = result["steps_done"]
    measured = {
        "s_per_step": (done[-1] - done[0]) / max(len(done) - 1, 1),
        "first_step_s": done[0] - launched,
        "peak_gb": peak.rss / 1e9,
        "peak_pss_gb": peak.pss / 1e9,
        "accuracy": held_out_accuracy(Path(result["final_model"]), held_out),
    }
    shutil.rmtree(work, ignore_errors=True)  # a failed run's folder stays, with its log
    return measured


RELAYS = {"relay": "relay (default)", "relay-separate": "relay separate"}  # contender -> column


def table(results: dict, sizes: list[int], steps: int, rounds: int) -> str:
    def cell(contender, key, agg=statistics.median, fmt="{:.3f}"):
        values = [r[key] for r in results.get(contender, []) if key in r]
        return (agg(values), fmt.format(agg(values))) if values else (None, "n/a")

    relays = [c for c in RELAYS if c in results]
    head = "".join(f" {RELAYS[c]} | {RELAYS[c]}/TRL |" for c in relays)
    lines = [f"| | TRL |{head}", "|---|---|" + "---|---|" * len(relays)]

    def row(label, key, **kw):
        t, ts = cell("trl", key, **kw)
        cells = ""
        for c in relays:
            r, rs = cell(c, key, **kw)
            cells += f" {rs} | {f'{r / t:.2f}' if t and r is not None else 'n/a'} |"
        lines.append(f"| {label} | {ts} |{cells}")

    for p in sizes:
        row(f"seconds per step, {p}x{SAMPLES}", f"s_per_step_{p}")
    row("launch to first step (s)", "first_step_s", fmt="{:.1f}")
    row("peak memory, all processes, RSS sum (GB)", "peak_gb", agg=max, fmt="{:.2f}")
    row("peak memory, all processes, PSS sum (GB)", "peak_pss_gb", agg=max, fmt="{:.2f}")
    row(f"held-out greedy accuracy after {steps} steps ({rounds} seeds)", "accuracy", agg=statistics.fmean)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=1, help="alternated rounds; round r uses seed r")
    ap.add_argument("--sizes", default="2,8", help="prompts per step, comma-separated (8 samples each)")
    ap.add_argument(
        "--only", help="comma-separated contenders to run, of trl, relay, relay-separate (default: all three)"
    )
    # the child process's arguments
    ap.add_argument("--child", choices=["trl", *RELAYS], help=argparse.SUPPRESS)
    for name in ("--work", "--data", "--model"):
        ap.add_argument(name, help=argparse.SUPPRESS)
    ap.add_argument("--prompts", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a)
        return 0
    sizes = [int(s) for s in a.sizes.split(",")]
    data = write_data(sizes, a.steps, a.rounds)
    train_rows, held_out = addition_rows()
    wanted = ["trl", *RELAYS] if a.only is None else [c.strip() for c in a.only.split(",")]
    if unknown := [c for c in wanted if c not in ("trl", *RELAYS)]:
        ap.error(f"--only: unknown contender(s) {unknown}; choose from trl, {', '.join(RELAYS)}")
    model = tiny_plain_model(train_rows)
    print(f"peer_trl: model {model}, held-out accuracy before training {held_out_accuracy(model, held_out):.3f}")
    pythons = dict.fromkeys(RELAYS, sys.executable)
    if "trl" in wanted:
        python, why = trl_python()
        if python is None:
            print(f"peer_trl: TRL is not available, running relay alone: {why}", flush=True)
        else:
            pythons["trl"] = python
    contenders = [c for c in ("trl", *RELAYS) if c in pythons and c in wanted]
    results: dict[str, list[dict]] = {c: [] for c in contenders}
    for r in range(a.rounds):
        order = contenders if r % 2 == 0 else contenders[::-1]
        for contender in order:
            merged: dict = {}
            for p in sizes:
                m = one_run(pythons[contender], contender, p, a, data, model, r, held_out)
                print(f"round {r} {contender} {p}x{SAMPLES}: {json.dumps({k: round(v, 4) for k, v in m.items()})}")
                merged[f"s_per_step_{p}"] = m["s_per_step"]
                if p == sizes[0]:  # start-up, memory and accuracy: the first size's run
                    merged.update((k, m[k]) for k in ("first_step_s", "peak_gb", "peak_pss_gb", "accuracy"))
                for k in ("peak_gb", "peak_pss_gb"):
                    merged[k] = max(merged[k], m[k])
            results[contender].append(merged)
    print(f"\n{os.cpu_count()} CPUs, {a.steps} steps per run, {a.rounds} round(s), medians over rounds\n")
    print(table(results, sizes, a.steps, a.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
