"""TRL's own multi-turn tool mode (GRPOTrainer(tools=...)) on configs/smol_tool.yaml's task.

    python benchmarks/peer_trl_tools.py [--steps 6]

The task is the recipe's: chat_tool's training rows for seed 0 (three-digit products and two-step
expressions, the hermes call format and the `python` tool's schema in the system prompt), the
recipe's reward (the last integer of the final answer), SmolLM2-135M-Instruct as relay converts it,
4 prompts x 8 samples a step, temperature 1.0, lr 1e-5 constant, no KL. The `python` tool runs the
model's code in relay's sandbox. Two attempts:

1. the model's own chat template, as TRL receives it;
2. the same weights with TRL's Qwen2.5 template, which writes tool calls in the hermes format the
   task asks for and which TRL knows how to parse: the same special tokens (<|im_start|>,
   <|im_end|>), so nothing the model knows is lost.

Prints what TRL says or reaches (training reward and tool calls per step). The instruct model's
own relay numbers for the same task are in docs/models.md. TRL comes from benchmarks/peer_trl.py's
.venv-trl; the script runs itself there.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def python(code: str) -> str:
    """Run Python code and return what it prints.

    Args:
        code: The Python program to run.
    """
    from relay.tools.sandbox import run_code

    result = run_code(code)
    return result.stdout if result.ok else (result.error or result.stderr or "the program failed")


def exact_answer(prompts, completions, ground_truth, **_):
    from relay.envs.chat_arithmetic import final_integer

    def answer(turns):
        said = [t.get("content") or "" for t in turns if t["role"] == "assistant"]
        return final_integer(said[-1]) if said else None

    return [1.0 if answer(c) == g else 0.0 for c, g in zip(completions, ground_truth)]


def trainer(folder: str, template: str | None, steps: int, out: str):
    sys.modules["vllm"] = None  # TRL generates with transformers on a CPU
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from relay.config import load_config
    from relay.run.rows import task_rows

    torch.set_num_threads(os.cpu_count() or 1)
    cfg = load_config(str(REPO / "configs" / "smol_tool.yaml"), ["run.seed=0"])
    rows, _ = task_rows(cfg.task, cfg.tools, cfg.run.seed)
    t, r = cfg.training, cfg.rollout
    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    if template is not None:
        tokenizer.chat_template = template
    dataset = Dataset.from_list([{"prompt": x["messages"], "ground_truth": x["ground_truth"]} for x in rows])
    config = GRPOConfig(
        output_dir=out, use_cpu=True, seed=0, max_steps=steps, learning_rate=t.lr, lr_scheduler_type="constant",
        per_device_train_batch_size=t.prompts_per_step * r.n, num_generations=r.n,
        max_completion_length=r.max_new_tokens * 2, temperature=r.temperature, top_k=0, beta=0.0, loss_type="dapo",
        max_tool_calling_iterations=2, bf16=False, gradient_checkpointing=False, report_to="none",
        save_strategy="no", logging_steps=1, disable_tqdm=True,
    )  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return GRPOTrainer(
        model=model, processing_class=tokenizer, reward_funcs=exact_answer, args=config, train_dataset=dataset,
        tools=[python],
    )  # fmt: skip


def attempt(name: str, folder: str, template: str | None, steps: int) -> None:
    with tempfile.TemporaryDirectory(prefix="peer-trl-tools-") as out:
        try:
            run = trainer(folder, template, steps, out)
        except Exception as e:  # what TRL says, as the result of this attempt
            print(f"{name}: TRL refuses: {type(e).__name__}: {e}", flush=True)
            return
        run.train()
    for log in run.state.log_history:
        if "step" in log and "reward" in log:
            tools = {k: round(v, 3) for k, v in log.items() if k.startswith("tools/")}
            print(f"{name}: step {log['step']}: reward {log['reward']:.3f} {tools}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    a = ap.parse_args()
    try:
        sys.modules["vllm"] = None
        import trl  # noqa: F401
    except ImportError:
        from benchmarks.peer_trl import trl_python

        python_bin, why = trl_python()
        if python_bin is None:
            print(f"peer_trl_tools: TRL is not available: {why}")
            return 1
        return subprocess.call([python_bin, __file__, *sys.argv[1:]])
    import trl.chat_template_utils as templates

    from relay.config import load_config
    from relay.run.model_source import resolve_model_path

    cfg = load_config(str(REPO / "configs" / "smol_tool.yaml"), [])
    folder = resolve_model_path(cfg.model, cfg.task, cfg.tools, cfg.critic, cfg.reward_model)
    attempt("SmolLM2's own template", folder, None, a.steps)
    attempt("SmolLM2 with TRL's Qwen2.5 template", folder, templates.qwen2_5_chat_template, a.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
