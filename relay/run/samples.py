"""See what the model saw: a few full episodes of a step as readable text.

    writer = SampleWriter.from_config(cfg, run_dir, model_path)   # logging.samples_every, samples_per_write
    writer.write(step, samples)     # runs/<name>/samples/step_000010.txt on the steps it is due

Each episode is decoded from the exact token ids the engine saw and produced (special tokens
kept, so the chat template is visible): the prompt, each model turn with its tool calls, each
observation, the reward and the finish reason. `python -m relay.run.show runs/<name>` prints the
latest file with colours; the section lines below are what it reads.
"""

from __future__ import annotations

import json
import os
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from relay.config import Config
from relay.types import Sample

EPISODE = "════"  # opens an episode: step, episode, group, reward, finish reason
SECTION = "────"  # opens a section: prompt, model turn N, tool calls, observation, result
# Section kinds, as they appear after SECTION (relay.run.show colours by them).
PROMPT, MODEL_TURN, TOOL_CALLS, OBSERVATION, RESULT = "prompt", "model turn", "tool calls", "observation", "result"


def samples_file(folder: Path, step: int) -> Path:
    return Path(folder) / f"step_{step:06d}.txt"


def _json(value: Any, limit: int = 400) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def segments(sample: Sample) -> list[tuple[str, int, int]]:
    """(kind, start, end) over response_ids: model turns (turn_spans, else the loss_mask's runs of
    1) and the observation tokens between and after them."""
    spans = list(sample.turn_spans)
    if not spans:  # derive the model turns from the loss mask
        start = None
        for i, m in enumerate([*sample.loss_mask, 0]):
            if m and start is None:
                start = i
            elif not m and start is not None:
                spans.append((start, i))
                start = None
    out, pos = [], 0
    for start, end in spans:
        if start > pos:
            out.append((OBSERVATION, pos, start))
        out.append((MODEL_TURN, start, end))
        pos = max(pos, end)
    if pos < len(sample.response_ids):
        out.append((OBSERVATION, pos, len(sample.response_ids)))
    return out


def render_episode(sample: Sample, decode, step: int, index: int, total: int) -> str:
    """One episode as text; `decode(ids) -> str` is the tokenizer's decode."""
    finish = sample.finish_reason.value if sample.finish_reason is not None else "none"
    lines = [
        f"{EPISODE} step {step} · episode {index} of {total} · group {sample.group_id} · "
        f"reward {sample.reward:.4g} · finish {finish} · weights v{sample.weight_version} {EPISODE}",
        f"{SECTION} {PROMPT} · {len(sample.prompt_ids)} tokens {SECTION}",
        decode(sample.prompt_ids),
    ]
    turn = 0
    for kind, start, end in segments(sample):
        ids = sample.response_ids[start:end]
        if kind == MODEL_TURN:
            turn += 1
            lines += [f"{SECTION} {MODEL_TURN} {turn} · {len(ids)} tokens {SECTION}", decode(ids)]
            calls = [c for c in sample.tool_calls if c.get("turn") == turn]
            if calls:
                lines.append(f"{SECTION} {TOOL_CALLS} · turn {turn} {SECTION}")
                for c in calls:
                    status = "ok" if c.get("ok") else f"error: {c.get('error')}"
                    name = c.get("name") or "(malformed call)"
                    args = "" if c.get("arguments") is None else " " + _json(c.get("arguments"))
                    lines.append(f"{name}{args} -> {status} ({c.get('seconds', 0.0):.2f} s)")
        else:
            lines += [f"{SECTION} {OBSERVATION} · {len(ids)} tokens {SECTION}", decode(ids)]
    lines.append(f"{SECTION} {RESULT} {SECTION}")
    lines.append(f"reward {sample.reward:.6g} · finish {finish} · ground truth {_json(sample.ground_truth)}")
    if "rm_score" in sample.meta:  # reward_model.*: the parts of the reward, to spot reward hacking
        rm_score = sample.meta["rm_score"]
        lines.append(
            f"reward model score {'none' if rm_score is None else f'{rm_score:.6g}'} · "
            f"rule reward {sample.meta.get('rule_reward', 0.0):.6g}"
        )
    env = sample.meta.get("env") or {}
    if env:
        lines.append(
            f"environment rewards {_json(env.get('rewards'))}"
            + (f" · error {env['error']}" if env.get("error") else "")
        )
    if sample.token_rewards:
        lines.append(f"token rewards {_json({int(k): v for k, v in sorted(sample.token_rewards.items())})}")
    return "\n".join(lines) + "\n"


def pick(samples: list[Sample], k: int) -> list[Sample]:
    """k samples spread evenly over the batch (so over several prompts' groups)."""
    if len(samples) <= k:
        return list(samples)
    return [samples[i * len(samples) // k] for i in range(k)]


class SampleWriter:
    """Writes `per_write` episodes at the first step, every `every` steps and the last step
    (every=0: never). The tokenizer loads in a background thread from the start: importing
    transformers and reading it take seconds, which then overlap Ray's start and the actors'
    instead of delaying the first step. Writing is a side view of the run: a failure is warned
    about once and turns the writer off; training goes on."""

    def __init__(
        self,
        folder: Path,
        tokenizer_path: str,
        every: int,
        per_write: int,
        total_steps: int,
        trust_remote_code: bool = False,
    ):
        self.folder, self.tokenizer_path, self.trust_remote_code = Path(folder), tokenizer_path, trust_remote_code
        self.every, self.per_write, self.total_steps = every, per_write, total_steps
        self._tokenizer = None
        self._loading: Future | None = None
        if every > 0:
            pool = ThreadPoolExecutor(1, thread_name_prefix="relay-sample-tokenizer")
            self._loading = pool.submit(_load_tokenizer, tokenizer_path, trust_remote_code)
            pool.shutdown(wait=False)  # its one thread ends when the load does

    @classmethod
    def from_config(cls, cfg: Config, run_dir: Path, model_path: str) -> SampleWriter:
        """run_dir/samples, decoded with the run's tokenizer (model.tokenizer_path, else `model_path`)."""
        lg = cfg.logging
        return cls(
            Path(run_dir) / "samples",
            cfg.model.tokenizer_path or model_path,
            lg.samples_every,
            lg.samples_per_write,
            cfg.training.steps,
            cfg.model.trust_remote_code,
        )

    def due(self, step: int) -> bool:
        return self.every > 0 and (step == 1 or step % self.every == 0 or step == self.total_steps)

    def write(self, step: int, samples: list[Sample]) -> Path | None:
        """The file written, or None when this step is not due (or writing is off)."""
        if not self.due(step) or not samples:
            return None
        try:
            if self._tokenizer is None:
                self._tokenizer = self._loading.result()  # raises what loading raised
            chosen = pick(samples, self.per_write)
            text = "\n".join(
                render_episode(s, self._decode, step, i, len(chosen)) for i, s in enumerate(chosen, start=1)
            )
            path = samples_file(self.folder, step)
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text, encoding="utf-8", errors="backslashreplace")
            os.replace(tmp, path)  # a reader never sees half a file
            return path
        except Exception as e:  # a side view must not stop training
            warnings.warn(
                f"logging.samples_every: cannot write samples ({type(e).__name__}: {e}); turned off", stacklevel=2
            )
            self.every = 0
            return None

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=False)


def _load_tokenizer(path: str, trust_remote_code: bool):
    """What decodes the episodes. A folder with a tokenizer.json (every fast tokenizer) decodes
    through the `tokenizers` library, as transformers' fast tokenizers do, in 20 ms and 20 MB:
    transformers' AutoTokenizer imports torch (3-4 s and 400 MB in the driver, which has no other
    use for it). Remote code, or a tokenizer that cleans up spaces after decoding, goes through
    transformers."""
    folder = Path(path)
    config = folder / "tokenizer_config.json"
    cleans_up = config.is_file() and json.loads(config.read_text()).get("clean_up_tokenization_spaces", False)
    if (folder / "tokenizer.json").is_file() and not trust_remote_code and not cleans_up:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(folder / "tokenizer.json"))
    from relay.models.loading import load_tokenizer

    return load_tokenizer(path, trust_remote_code)
