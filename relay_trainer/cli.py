"""The `relay` command: each of relay's entry points under one name.

    relay train [--config NAME_OR_FILE] [--resume] [key=value ...]   the RL loop (python driver.py)
    relay show RUN [--files N] [--step S]        sample episodes of a run (python -m relay.run.show)
    relay plot RUN [--keys a,b] [-o out.png]     metric curves (python -m relay.run.plot)
    relay plot --timeline RUN [-o out.png]       each role's busy and idle time along the wall clock
    relay template-check MODEL                   a model's chat template, turn by turn
    relay tool-server [--port P ...]             the sandboxed HTTP tool server
    relay rm-hacks RUN                           reward-model exploits found in a run's samples
    relay tune SWEEP.yaml [key=value ...]        a Ray Tune sweep (python tune.py)
    relay configs                                the shipped configs, by name

`--config` takes a file or a shipped config's name (`default`, `ppo`, `textgame`, ...), so an
installed relay runs its recipes from any folder.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

# command -> (module, what it does); each module's main(argv) parses the rest of the arguments
TOOLS = {
    "show": ("relay.run.show", "print the latest sample episodes of a run"),
    "plot": ("relay.run.plot", "draw a run's metric curves (or, --timeline, its roles' busy time) to a PNG"),
    "template-check": ("relay.models.template_check", "check a model's chat template for multi-turn training"),
    "tool-server": ("relay.tools.server", "serve sandboxed code runs over HTTP"),
    "rm-hacks": ("relay.rewards.hacks", "reward-model exploits in a run's samples"),
    "tune": ("relay_trainer.tune", "a Ray Tune sweep: relay tune configs/tune.yaml [key=value ...]"),
}


def train_main(argv: list[str]) -> int:
    print("relay: starting (importing ray) ...", flush=True)
    from relay.run.command_line import run_command_line
    from relay.run.recipes import recipe_path
    from relay_trainer.loop import train

    description = "Train with relay's RL loop. --config takes a file or a shipped config's name (relay configs)."
    return run_command_line(train, description, argv, config_path=recipe_path, prog="relay train")


def configs_main(argv: list[str]) -> int:
    from relay.run.recipes import configs_folder, shipped_configs

    print(f"shipped configs in {configs_folder()}:")
    for name in shipped_configs():
        print(f"  {name}")
    return 0


def usage() -> str:
    lines = ["usage: relay COMMAND [ARGS ...]", "", "commands:"]
    lines.append("  train            train a model: relay train [--config NAME_OR_FILE] [--resume] [key=value ...]")
    lines += [f"  {name:<16} {what}" for name, (_, what) in TOOLS.items()]
    lines.append("  configs          list the shipped configs")
    lines.append("")
    lines.append("`relay COMMAND --help` describes a command's arguments.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    command, rest = argv[0], argv[1:]
    commands: dict[str, Callable[[list[str]], int | None]] = {"train": train_main, "configs": configs_main}
    if command in TOOLS:
        commands[command] = importlib.import_module(TOOLS[command][0]).main
    if command not in commands:
        print(f"relay: error: unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        return 2
    return commands[command](rest) or 0


if __name__ == "__main__":
    sys.exit(main())
