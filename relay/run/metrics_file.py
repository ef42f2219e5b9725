"""Reading a run's metrics.jsonl: the curves (relay/run/plot.py) and the timeline
(relay/run/timeline.py) both draw from it."""

from __future__ import annotations

import json
import warnings
from pathlib import Path


def load_metrics(path: str | Path) -> list[dict]:
    """Records of a metrics.jsonl (or of the one in a run folder), one per step, by step.

    A resumed run appends to the same file and may repeat steps logged after its checkpoint;
    the last record of a step wins. A torn last line (crash mid-write) is skipped with a warning.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    by_step: dict[int, dict] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                warnings.warn(f"{path}:{n}: not JSON, skipped", stacklevel=2)
                continue
            try:
                by_step[int(record["step"])] = record
            except (TypeError, KeyError, ValueError):  # a line some other tool wrote: no traceback for it
                warnings.warn(f"{path}:{n}: no step number, skipped", stacklevel=2)
    return [by_step[s] for s in sorted(by_step)]
