"""The reward hacks of GRPO runs against a reward model, which the next build of tiny-rm trains on:
their file (HACKS, shipped beside this module), how a build reads it (`read_hacks`) and how a run's
are collected: `relay rm-hacks runs/<name> [--rm PATH] [--out FILE]`
(`python -m relay.rewards.hacks`).

Reads the run's sample files (run with logging.samples_every=1 and a large
logging.samples_per_write to see whole batches), keeps each arithmetic answer the exact rule
calls wrong, scores it and the prompt's right answer with the reward model (default: the shipped
tiny-rm) and appends to `--out` (default relay/rewards/rm_hacks.jsonl, which
`python -m relay.rewards.build_rm` trains on) every wrong answer the reward model scores at least
as high as the right one: the outputs GRPO found the reward model cannot tell from right ones.
The file stays sorted and free of duplicates, so collecting twice changes nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from relay.envs.arithmetic import arithmetic_reward
from relay.run.samples import EPISODE, MODEL_TURN, PROMPT, SECTION
from relay.run.show import sample_files
from relay.types import Sample

# Wrong answers a GRPO policy produced against an earlier tiny-rm and that it scored at least as
# high as the right one, {"prompt": "17+25", "answer": "32"} per line, sorted and distinct.
HACKS = Path(__file__).with_name("rm_hacks.jsonl")
_PROMPT = re.compile(r"(\d+)\+(\d+)")
_END = "<|im_end|>"


def read_hacks(digits: int, path: Path = HACKS) -> list[tuple[dict, str, str]]:
    """The collected hacks whose operands have at most `digits` digits, as (row, answer, "hack"),
    for a build to label by the exact rule. The file ships with the package, so a missing one
    is an error, not an empty list: a build without it would quietly train on fewer negatives."""
    out = []
    for line in path.read_text().splitlines():
        item = json.loads(line)
        a, b = (int(x) for x in item["prompt"].split("+"))
        if max(a, b) < 10**digits:
            out.append(({"prompt": item["prompt"], "ground_truth": str(a + b)}, item["answer"], "hack"))
    return out


def episodes(text: str) -> list[tuple[str, str]]:
    """(prompt like '17+25', answer text) of every single-turn episode in a sample file."""
    out = []
    for block in text.split(EPISODE + " step ")[1:]:
        prompt = answer = None
        section = None
        for line in block.splitlines():
            if line.startswith(SECTION + " "):
                title = line[len(SECTION) :].strip()
                section = PROMPT if title.startswith(PROMPT) else MODEL_TURN if title.startswith(MODEL_TURN) else None
                if section == MODEL_TURN:
                    answer = ""
                continue
            if section == PROMPT and prompt is None and (m := _PROMPT.search(line)):
                prompt = f"{m.group(1)}+{m.group(2)}"
            elif section == MODEL_TURN:
                answer += ("\n" if answer else "") + line
        if prompt is not None and answer is not None:
            out.append((prompt, answer.split(_END)[0]))
    return out


def wrong_answers(run: Path) -> list[tuple[str, str]]:
    """The distinct (prompt, answer) pairs of the run that the exact rule calls wrong."""
    found = set()
    for path in sample_files(run):
        for prompt, answer in episodes(path.read_text(encoding="utf-8")):
            a, b = (int(x) for x in prompt.split("+"))
            sample = Sample(prompt_ids=[], response_text=answer, final_text=answer, ground_truth=str(a + b))
            if arithmetic_reward(sample) == 0.0:
                found.add((prompt, answer))
    return sorted(found)


def fooling(wrong: list[tuple[str, str]], rm_path: str) -> list[tuple[str, str]]:
    """The wrong answers the reward model scores at least as high as the prompt's right answer."""
    from relay.rewards.scorers import ClassifierScorer

    scorer = ClassifierScorer(rm_path, micro_batch_size=256)

    def sample(prompt: str, answer: str) -> Sample:
        return Sample(prompt_ids=[], response_text=answer, meta={"messages": [{"role": "user", "content": prompt}]})

    right = [str(sum(int(x) for x in p.split("+"))) for p, _ in wrong]
    scores, _ = scorer.score([sample(p, a) for p, a in wrong] + [sample(p, r) for (p, _), r in zip(wrong, right)])
    n = len(wrong)
    return [w for i, w in enumerate(wrong) if scores[i] >= scores[n + i]]


def shipped_rm() -> str:
    from relay.models.shipped import RM_NAME, shipped_model

    return str(shipped_model(RM_NAME))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a run folder with samples/ (or a samples folder or file)")
    parser.add_argument("--rm", default=None, help="the reward model the run trained against (default: tiny-rm)")
    parser.add_argument("--out", type=Path, default=HACKS, help=f"file to add to (default: {HACKS})")
    args = parser.parse_args(argv)
    if not sample_files(args.run):
        print(f"relay rm-hacks: no sample files in {args.run} (run with logging.samples_every=1)", file=sys.stderr)
        return 2
    wrong = wrong_answers(args.run)
    hacks = fooling(wrong, args.rm or shipped_rm()) if wrong else []
    known = (
        {tuple(json.loads(line).values()) for line in args.out.read_text().splitlines()} if args.out.exists() else set()
    )
    rows = sorted(known | set(hacks))
    args.out.write_text("".join(json.dumps({"prompt": p, "answer": a}) + "\n" for p, a in rows))
    print(
        f"relay rm-hacks: {len(wrong)} distinct wrong answers in {args.run}; the reward model scores "
        f"{len(hacks)} of them at least as high as the right answer; {len(rows) - len(known)} new, {len(rows)} in {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
