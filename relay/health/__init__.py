"""Run health: a sentinel for reward hacking and collapse (docs/health.md).

signals.py  batch_signals: what the rules need from a step's samples, read in the driver
rules.py    the rules, pure functions of a step's metrics and the steps before it
monitor.py  HealthMonitor: the rules over a run, the alarm lines, health/* metrics, health.stop_on
"""

from relay.health.monitor import HealthMonitor, held_out_sample
from relay.health.signals import batch_signals

__all__ = ["HealthMonitor", "batch_signals", "held_out_sample"]
