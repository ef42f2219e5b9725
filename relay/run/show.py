"""Print the latest sample episodes of a run: `python -m relay.run.show runs/<name> [--files N] [--step S]`.

Reads runs/<name>/samples/step_XXXXXX.txt (written every `logging.samples_every` steps, see
relay/run/samples.py) and prints it with rich: model turns highlighted, observations (tokens the
model read but did not write) dimmed, tool calls and results in their own colours.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from relay.run.samples import EPISODE, MODEL_TURN, OBSERVATION, PROMPT, RESULT, SECTION, TOOL_CALLS

STYLES = {PROMPT: "", MODEL_TURN: "bold green", OBSERVATION: "dim", TOOL_CALLS: "yellow", RESULT: "cyan"}
_STEP = re.compile(r"step_(\d+)\.txt$")


def sample_files(run: Path) -> list[Path]:
    """The run's sample files, oldest step first. `run` is a run folder, its samples/ folder or a file."""
    run = Path(run)
    if run.is_file():
        return [run]
    folder = run / "samples" if (run / "samples").is_dir() else run
    files = [p for p in folder.glob("step_*.txt") if _STEP.search(p.name)]
    return sorted(files, key=lambda p: int(_STEP.search(p.name).group(1)))


def section_kind(line: str) -> str | None:
    """The kind a SECTION line opens (prompt, model turn, ...), or None for a content line."""
    if not (line.startswith(SECTION + " ") and line.rstrip().endswith(SECTION)):
        return None
    title = line[len(SECTION) :].strip()
    return next((kind for kind in STYLES if title.startswith(kind)), None)


def render(text: str, console) -> None:
    from rich.text import Text

    style = ""
    for line in text.splitlines():
        if line.startswith(EPISODE + " "):
            console.print()
            console.print(Text(line, style="bold magenta"))
            style = ""
        elif (kind := section_kind(line)) is not None:
            console.print(Text(line, style="bold"))
            style = STYLES[kind]
        else:
            console.print(Text(line, style=style))  # Text: model output is never read as markup


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a run folder (runs/<name>), its samples/ folder, or one sample file")
    parser.add_argument("--files", type=int, default=1, help="how many of the latest sample files (default 1)")
    parser.add_argument("--step", type=int, default=None, help="the file of this step instead of the latest")
    args = parser.parse_args(argv)
    files = sample_files(args.run)
    if args.step is not None:
        files = [p for p in files if int(_STEP.search(p.name).group(1)) == args.step]
    if not files:
        what = f"step {args.step}" if args.step is not None else "any step"
        print(
            f"relay.run.show: no sample files for {what} in {args.run} (written every logging.samples_every steps)",
            file=sys.stderr,
        )
        return 2
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False, soft_wrap=True)  # long lines stay whole: copyable
    for path in files[-max(args.files, 1) :]:
        console.print(Text(f"# {path}", style="bold underline"))
        render(path.read_text(encoding="utf-8", errors="replace"), console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
