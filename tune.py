"""Ray Tune sweeps' entry point: `python tune.py configs/tune.yaml [key=value ...]`.

The sweep itself is relay_trainer/tune.py, in a package so that `pip install` brings it: `relay tune`
runs the same main.
"""

from __future__ import annotations

import sys

from relay_trainer.tune import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
