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

from relay.config import ConfigError


def load_rows(
    path: str | Path, prompt_key: str = "prompt", answer_key: str = "ground_truth", for_env: bool = False
) -> list[dict[str, Any]]:
    """The file's rows: a prompt (or messages) and the answer each, or, `for_env`, rows given whole to
    an environment's reset(**row), which need neither (its first observation is the prompt). A bad
    file or row raises ConfigError naming the file and its 1-based line (JSONL) or row (Parquet), and
    the task.* key involved."""
    path = Path(path)
    if not path.exists():
        raise ConfigError([f"dataset file not found: {path}"])
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            records = pq.read_table(path).to_pylist()
        except Exception as e:  # pyarrow's errors have no common base class
            raise ConfigError([f"{path}: cannot read the Parquet file ({type(e).__name__}: {e})"]) from None
        places = [f"{path} row {i}" for i in range(1, len(records) + 1)]
    elif path.suffix in (".jsonl", ".json"):
        records, places = [], []
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError([f"{path}: cannot read the file ({e})"]) from None
        for line_no, line in enumerate(lines, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ConfigError([f"{path}:{line_no}: not valid JSON ({e.msg}, column {e.colno})"]) from None
                places.append(f"{path}:{line_no}")
    else:
        raise ConfigError([f"{path}: unsupported dataset format {path.suffix!r} (use .jsonl or .parquet)"])
    rows = []
    for where, rec in zip(places, records):
        if not isinstance(rec, dict):
            raise ConfigError([f"{where}: a row must be a JSON object, got {type(rec).__name__}"])
        if for_env:
            rows.append({**rec, "ground_truth": rec[answer_key]} if answer_key in rec else dict(rec))
            continue
        if "messages" not in rec and prompt_key not in rec:
            raise ConfigError([f"{where}: row has neither {prompt_key!r} (task.prompt_key) nor 'messages'"])
        if answer_key not in rec:
            raise ConfigError([f"{where}: row has no {answer_key!r} (task.answer_key)"])
        row = {"ground_truth": rec[answer_key]}
        row["messages" if "messages" in rec else "prompt"] = rec.get("messages", rec.get(prompt_key))
        rows.append(row)
    if not rows:
        raise ConfigError([f"{path}: the file has no rows"])
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
