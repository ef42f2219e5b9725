"""Seconds each tool parser takes on hostile model text, at growing lengths: the parsers run in
the rollout worker on every model turn, so their time must grow linearly with the text.

    python benchmarks/parser_hostile.py [--lengths 10000 40000 160000]

Each input is a pattern repeated to the length (brackets that never close, openings of calls
that never end, many ReAct actions, ...). A parser whose time grows by more than ~4x when the
length grows 4x is quadratic somewhere. Printed: the median of 3 runs per cell.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from relay.tools.parsers import get_parser  # noqa: E402

PATTERNS = {
    "{": "{",
    '{"': '{"',
    "[{": "[{",
    '{"a":1 ': '{"a":1 ',
    "<tool>": "<tool>",
    "<tool_call>": "<tool_call>",
    "Action": "Action: f\n",
    "[f(": "[f(",
    "call-open": '{"name": "f", "arguments": ',
}
PARSERS = ("tag", "hermes", "json", "react", "function_call")


def seconds(parser, text: str) -> float:
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        parser.parse(text)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[10_000, 40_000, 160_000])
    args = ap.parse_args()
    print(f"{'pattern':<12} {'parser':<14} " + " ".join(f"{n:>10,}" for n in args.lengths) + "   (seconds)")
    for label, unit in PATTERNS.items():
        for name in PARSERS:
            parser = get_parser(name)
            cells = [seconds(parser, (unit * (n // len(unit) + 1))[:n]) for n in args.lengths]
            print(f"{label:<12} {name:<14} " + " ".join(f"{s:>10.4f}" for s in cells))


if __name__ == "__main__":
    main()
