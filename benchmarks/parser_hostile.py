"""Seconds each tool parser takes on hostile model text of 1k, 10k and 100k tokens: the parsers
run on every model turn (in the rollout worker, and in the endpoint for each reply), so their time
must grow linearly with the text.

    python benchmarks/parser_hostile.py [--tokens 1000 10000 100000] [--before REV] [--cap-s 20]

Each input is a pattern grown to the length: brackets that never close, openings of calls that
never end, a long list of calls, an "Action:" line padded with blanks, ... A token is taken as 4
characters (a BPE tokenizer's average on code and prose), except in blank runs, which such a
tokenizer packs densely: there a token is 64 characters (64,000 blanks were 1,012 tokens).
A parser whose time grows by much more than 10x when the text grows 10x is quadratic somewhere.

--before REV runs the same inputs against the parsers of git revision REV as well (extracted to a
temporary folder, never checked out), so a fix prints its before and after side by side. Every
parser runs in a child process: a cell over --cap-s seconds is stopped and printed as ">cap", and
the longer inputs of that pattern are not tried. Printed: the median of 3 runs (1 run past 1 s).
"""

from __future__ import annotations

import argparse
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PARSERS = ("tag", "hermes", "json", "react", "function_call", "qwen3_coder", "harmony", "llama3_json", "mistral")


def repeat(unit: str, head: str = "", tail: str = ""):
    return lambda n: head + (unit * (n // len(unit) + 1))[: max(n - len(head) - len(tail), 0)] + tail


# name -> (characters per token, text of n characters)
PATTERNS = {
    "{": (4, repeat("{")),
    '{"': (4, repeat('{"')),
    "[{": (4, repeat("[{")),
    '{"a":1 ': (4, repeat('{"a":1 ')),
    "<tool>": (4, repeat("<tool>")),
    "<tool_call>": (4, repeat("<tool_call>")),
    "<function=": (4, repeat("<tool_call><function=")),
    "Action": (4, repeat("Action: f\n")),
    "Action+blanks": (64, repeat(" ", "Action: python", "x\nAction Input: 1")),
    "[f(": (4, repeat("[f(")),
    "call list": (4, repeat("f(a=1), ", "[", "f(a=1)]")),
    "nested list": (4, repeat("f(a=[1]), ", "[", "f(a=[1])]")),
    "bytes args": (4, repeat("python(code=b'1'), ", "[", "f()]")),
    "call-open": (4, repeat('{"name": "f", "arguments": ')),
    "[TOOL_CALLS]": (4, repeat("[TOOL_CALLS]")),
    "<|message|>": (4, repeat("<|channel|>commentary to=functions.f<|message|>")),
}


def child(src: str, parser_name: str, first: int, tokens: list[int]) -> None:
    """Time one parser on the patterns from index `first`, printing a line per cell as it ends."""
    sys.path.insert(0, src)
    from relay.tools.parsers import get_parser

    parser = get_parser(parser_name)
    for index, (chars_per_token, make) in enumerate(PATTERNS.values()):
        if index < first:
            continue
        for n in tokens:
            text, runs = make(n * chars_per_token), []
            while len(runs) < 3:
                t0 = time.perf_counter()
                parser.parse(text)
                runs.append(time.perf_counter() - t0)
                if runs[0] > 1.0:
                    break
            print(f"{index}\t{n}\t{statistics.median(runs)}", flush=True)


def measure(src: str, parser_name: str, tokens: list[int], cap_s: float) -> dict[tuple[int, int], float | None]:
    """(pattern index, tokens) -> seconds, None where the cell ran past cap_s (and longer ones skipped)."""
    cells: dict[tuple[int, int], float | None] = {}
    first = 0
    while first < len(PATTERNS):
        argv = [sys.executable, __file__, "--child", src, parser_name, str(first), *map(str, tokens)]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONHASHSEED="0"))
        last, stuck = time.monotonic(), None
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, cap_s - (time.monotonic() - last)))
            if not ready:  # the cell in progress is past the cap
                proc.kill()
                stuck = first
                break
            line = proc.stdout.readline()
            if not line:
                break
            index, n, seconds = line.split("\t")
            cells[int(index), int(n)] = float(seconds)
            first, last = int(index) + (int(n) == tokens[-1]), time.monotonic()
        proc.wait()
        proc.stdout.close()
        if stuck is None:
            break
        for n in tokens:
            cells.setdefault((stuck, n), None)
        first = stuck + 1
    return cells


def cell(seconds: float | None) -> str:
    return f"{'>cap':>9}" if seconds is None else f"{seconds:>9.4f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    ap.add_argument("--before", metavar="REV", help="also time the parsers of this git revision")
    ap.add_argument("--cap-s", type=float, default=20.0, help="seconds a cell may take before it is stopped")
    ap.add_argument("--parsers", nargs="+", default=list(PARSERS))
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        src, name, first, *tokens = args.child
        child(src, name, int(first), [int(t) for t in tokens])
        return
    sources = {"now": str(REPO)}
    with tempfile.TemporaryDirectory() as tmp:
        if args.before:
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.before, "relay"], capture_output=True)
            archive.check_returncode()
            subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
            sources = {args.before[:10]: tmp, **sources}
        labels = list(PATTERNS)
        head = " ".join(f"{t:>9,}" for t in args.tokens)
        print(f"{'pattern':<14} {'parser':<14} {'code':<10} {head}   (seconds at that many tokens)")
        for name in args.parsers:
            results = {source: measure(path, name, args.tokens, args.cap_s) for source, path in sources.items()}
            for i, label in enumerate(labels):
                for source, cells in results.items():
                    row = " ".join(cell(cells.get((i, t))) for t in args.tokens)
                    print(f"{label:<14} {name:<14} {source:<10} {row}", flush=True)


if __name__ == "__main__":
    main()
