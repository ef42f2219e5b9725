"""Reading a Ray node's Prometheus export back, for tests of the run-tagged metrics (relay_trainer/metrics.py)."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from relay_trainer.metrics import PREFIX


def export_port(session_dir: str) -> int | None:
    """The Prometheus export port a node wrote into its session folder (None: not yet)."""
    for path in sorted(Path(session_dir).glob("metrics_export_port_*")):
        text = path.read_text().strip()
        if text.isdigit():
            return int(text)
    return None


def scrape(
    port: int, host: str = "127.0.0.1", prefix: str = "ray_" + PREFIX
) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample whose name starts with `prefix` on a node's export."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = []
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        match = re.match(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)", line)
        if match:
            name, labels, value = match.groups()
            samples.append((name, dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels or "")), float(value)))
    return samples
