"""The shipped configs (configs/*.yaml), reachable by name from a checkout and from an installed
package alike: `relay train --config ppo`, `ConfigStore.from_yaml("default")`.

In the repository they are configs/; a wheel installs that folder as the package relay.recipes
(pyproject.toml's package-dir), so they travel with `pip install`.
"""

from __future__ import annotations

from pathlib import Path

INSTALLED_CONFIGS = Path(__file__).resolve().parents[1] / "recipes"  # relay/recipes/ inside a wheel's install
REPOSITORY_CONFIGS = Path(__file__).resolve().parents[2] / "configs"  # a checkout (editable installs too)


def configs_folder() -> Path:
    """Where the shipped configs are: the installed package's, else the checkout's configs/."""
    return INSTALLED_CONFIGS if (INSTALLED_CONFIGS / "default.yaml").is_file() else REPOSITORY_CONFIGS


def shipped_configs() -> list[str]:
    return sorted(p.stem for p in configs_folder().glob("*.yaml"))


def recipe_path(name: str) -> str:
    """`name` as a file: an existing path as it is; else a shipped config by its name (`ppo`,
    `ppo.yaml`, `configs/ppo.yaml`); else `name` unchanged (loading it then reports the missing file)."""
    if Path(name).expanduser().exists():
        return name
    stem = Path(name).name.removesuffix(".yaml").removesuffix(".yml")
    shipped = configs_folder() / f"{stem}.yaml"
    return str(shipped) if shipped.is_file() else name
