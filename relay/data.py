"""Prompt datasets: built-in task rows or the user's JSONL / Parquet files.

A row is {"prompt": str} or {"messages": [{"role", "content"}, ...]}, plus "ground_truth".
The iterator's position (epoch, index) is part of every checkpoint, so a resumed run draws
exactly the prompts the uninterrupted run would have drawn.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any


def load_rows(
    path: str | Path, prompt_key: str = "prompt", answer_key: str = "ground_truth", for_env: bool = False
) -> list[dict[str, Any]]:
    """Rows for prompts (prompt or messages, and the answer), or, `for_env`, rows given whole to an
    environment's reset(**row), which need neither (its first observation is the prompt)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"dataset file not found: {path}")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        records = pq.read_table(path).to_pylist()
    elif path.suffix in (".jsonl", ".json"):
        records = []
        for line_no, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{line_no}: not valid JSON ({e.msg})") from None
    else:
        raise ValueError(f"{path}: unsupported dataset format {path.suffix!r} (use .jsonl or .parquet)")
    if for_env:
        return [{**rec, "ground_truth": rec[answer_key]} if answer_key in rec else dict(rec) for rec in records]
    rows = []
    for i, rec in enumerate(records):
        if "messages" not in rec and prompt_key not in rec:
            raise ValueError(f"{path}: row {i} has neither {prompt_key!r} nor 'messages'")
        if answer_key not in rec:
            raise ValueError(f"{path}: row {i} has no {answer_key!r}")
        row = {"ground_truth": rec[answer_key]}
        row["messages" if "messages" in rec else "prompt"] = rec.get("messages", rec.get(prompt_key))
        rows.append(row)
    return rows


def row_messages(row: dict[str, Any], system_prompt: str | None = None) -> list[dict[str, str]]:
    messages = list(row["messages"]) if "messages" in row else [{"role": "user", "content": row["prompt"]}]
    if system_prompt and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


class PromptIterator:
    """Endless shuffled passes over rows; state is two ints."""

    def __init__(self, rows: list[dict[str, Any]], seed: int, epoch: int = 0, index: int = 0):
        if not rows:
            raise ValueError("the prompt dataset is empty")
        self.rows, self.seed, self.epoch, self.index = rows, seed, epoch, index
        self._order = self._shuffled(epoch)

    def _shuffled(self, epoch: int) -> list[int]:
        order = list(range(len(self.rows)))
        random.Random(self.seed * 100_003 + epoch).shuffle(order)
        return order

    def take(self, n: int) -> list[dict[str, Any]]:
        out = []
        for _ in range(n):
            if self.index == len(self.rows):
                self.epoch, self.index = self.epoch + 1, 0
                self._order = self._shuffled(self.epoch)
            out.append(self.rows[self._order[self.index]])
            self.index += 1
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}
