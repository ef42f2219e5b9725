"""`python driver.py [--config X.yaml] [--resume] [key=value ...]`: the arguments, the config, the
run (resumed after a lost learner up to resources.auto_resume times), and an exit code. A user's
mistake is one line per problem and no traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from relay.config import ConfigError, load_config
from relay.failures import RunFailed
from relay.run.auto_resume import train_with_auto_resume
from relay.run.stop import HealthStopped, RunStopped, health_stop_line, stop_line


def run_command_line(
    train: Callable[..., dict],
    description: str | None,
    argv: list[str],
    config_path: Callable[[str], str] = str,
    prog: str | None = None,
) -> int:
    """Parse `argv`, load the config and call train(cfg, resume); the exit code: 0, 2 for bad
    input, 1 for a run that stopped on its own failures, 128 + signal when stopped by one.
    `config_path` turns the --config argument into a file (a shipped recipe's name into its path)."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default="configs/default.yaml", help="YAML config (default: the tiny CPU run)")
    parser.add_argument(
        "--resume", action="store_true", help="continue run.output_dir/run.name from its latest checkpoint"
    )
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. training.lr=1e-5")
    args = parser.parse_intermixed_args(argv)  # `x=1 --resume y=2` reads as it is meant
    args.config = config_path(args.config)
    program = prog or "driver.py"  # what the resume lines tell the user to run
    try:
        cfg = load_config(args.config, args.overrides)  # every problem, before any actor starts
        # resources.auto_resume: a run whose learner died resumes from its last checkpoint, here
        named = lambda name: load_config(args.config, [*args.overrides, f"run.name={name}"])  # noqa: E731
        train_with_auto_resume(train, cfg, args.resume, argv, named, program=program)
    except ConfigError as e:  # bad input: one line per problem, naming its key or file, no traceback
        print("\n".join(f"relay: error: {p}" for p in e.problems), file=sys.stderr)
        return 2
    except HealthStopped as stopped:  # health.stop_on: one line with the checkpoint and the resume command
        print(health_stop_line(stopped, argv, program), flush=True)
        return 1
    except RunFailed as e:  # a run of nothing but failures, or a checkpoint it cannot resume from
        print(f"relay: the run stopped: {e}", file=sys.stderr)
        return 1
    except RunStopped as stopped:  # SIGINT / SIGTERM: one line, the shell's 128 + signal status
        print(stop_line(stopped, argv, program), flush=True)
        return stopped.exit_code
    except KeyboardInterrupt:  # before the run's signal handlers were in place
        print("relay: interrupted before training started", flush=True)
        return 130
    return 0
