"""relay's Ray job entry point. `python driver.py [--config X.yaml] [--resume] [key=value ...]`

The loop itself is relay_trainer/loop.py (train_step, train), in a package so that `pip install`
brings it: `relay train`, RayPPOTrainer.fit and Ray Tune's trials run that same function, and from
Python it is `relay_trainer.loop.train(cfg)`.
"""

from __future__ import annotations

if __name__ == "__main__":  # the imports below take seconds; the first line should not wait for them
    print("relay: starting (importing ray) ...", flush=True)

import sys

from relay.run.command_line import run_command_line
from relay.run.recipes import recipe_path
from relay_trainer import loop

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """The command line (relay/run/command_line.py): the exit code, one line per user error."""
    argv = sys.argv[1:] if argv is None else argv
    return run_command_line(lambda *a, **k: loop.train(*a, **k), __doc__, argv, config_path=recipe_path)


if __name__ == "__main__":
    sys.exit(main())
