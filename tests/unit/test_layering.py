"""Imports run one way: relay <- actors <- relay_trainer <- driver.py, tune.py, and `relay`, the
pure library, never imports ray. Its one name from above, `relay.RayPPOTrainer`, is resolved by name
on first use (relay/__init__.py), never imported. Checked on the source with `ast`, so an import inside a function (one that
runs late, or only on some paths) counts as much as one at the top of a file."""

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RELAY = REPO / "relay"


def test_no_ray_import_statement_in_relay():
    offenders = []
    for path in RELAY.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [f"{path}: {n}" for n in names if n == "ray" or n.startswith("ray.")]
    assert not offenders, offenders


def test_importing_all_of_relay_does_not_load_ray():
    modules = [".".join(p.relative_to(RELAY.parent).with_suffix("").parts) for p in RELAY.rglob("*.py")]
    modules = [m.removesuffix(".__init__") for m in modules if not m.endswith("__main__")]
    code = "import importlib, sys\n" + "".join(
        f"importlib.import_module({m!r})\n" for m in modules if "sglang" not in m and "vllm" not in m
    )
    code += "assert 'ray' not in sys.modules, sorted(k for k in sys.modules if k.startswith('ray'))[:5]\n"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=RELAY.parent)


# ------------------------------------------------------------------------------ the import graph


def project_modules() -> dict[str, Path]:
    """Dotted module name -> file, for relay/, actors/, relay_trainer/, driver.py and tune.py."""
    packages = ("relay", "actors", "relay_trainer")
    files = [*(p for package in packages for p in (REPO / package).rglob("*.py")), REPO / "driver.py", REPO / "tune.py"]
    modules = {}
    for path in files:
        parts = path.relative_to(REPO).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_names(module: str, path: Path) -> list[tuple[str, int]]:
    """(dotted name, line) of every import in the file, at any depth; for `from a import b`
    both `a` and `a.b` (b may be a submodule). Relative imports are made absolute."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (
                ".".join([*package[: len(package) - node.level + 1], *([node.module] if node.module else [])])
                if node.level
                else node.module
            )
            out += [(base, node.lineno)] + [(f"{base}.{a.name}", node.lineno) for a in node.names if a.name != "*"]
    return out


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {project module it imports: line}. An import names the longest project module
    that prefixes it (`relay.envs.base.StepResult` -> relay.envs.base); other imports are left out."""
    modules = project_modules()
    graph = {}
    for module, path in modules.items():
        edges = {}
        for name, line in imported_names(module, path):
            parts = name.split(".")
            target = next(
                (".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in modules), None
            )
            if target is not None and target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def package_graph(graph: dict[str, dict[str, int]]) -> dict[str, set[str]]:
    """The graph with each package's direct part as one node: relay/envs/ is `relay.envs`,
    relay/agent/loop.py is `relay.agent.loop`. A cycle between folders shows here even when no two files
    import each other in a loop (relay.agent.loop -> relay.envs.base, relay.envs.textgame -> relay.agent.loop)."""

    def unit(module: str) -> str:
        return ".".join(module.split(".")[:2])

    out: dict[str, set[str]] = {}
    for module, edges in graph.items():
        out.setdefault(unit(module), set()).update(unit(t) for t in edges if unit(t) != unit(module))
    return out


def find_cycles(graph: dict[str, set[str]] | dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle per back edge of a depth-first search: [a, b, ..., a]; none iff the graph is acyclic."""
    state, stack, cycles = {}, [], []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for succ in sorted(graph.get(node, ())):
            if state.get(succ) == "open":
                cycles.append(stack[stack.index(succ) :] + [succ])
            elif succ not in state:
                visit(succ)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_the_graph_sees_the_imports():
    graph = import_graph()
    # a lazy import (inside a function) and a top-level one, so the checks below are not vacuous
    assert "relay_trainer.tune" in graph["tune"] and "relay_trainer.pools" in graph["relay_trainer.tune"]
    assert "relay_trainer.loop" in graph["driver"] and "relay_trainer.pools" in graph["relay_trainer.loop"]
    assert "relay.config" in graph["relay_trainer.pools"]
    assert "relay.envs.chat" in graph["relay.agent.loop"] and "relay.envs.base" in graph["relay.agent.loop"]


def test_no_import_cycles_between_modules_or_packages():
    graph = import_graph()
    cycles = [" -> ".join(c) for c in find_cycles(graph)]
    assert not cycles, "import cycles between modules:\n" + "\n".join(cycles)
    cycles = [" -> ".join(c) for c in find_cycles(package_graph(graph))]
    assert not cycles, "import cycles between packages (relay.X is relay/X.py or relay/X/):\n" + "\n".join(cycles)


def layering_offenders(prefix: str, forbidden: set[str]) -> list[str]:
    """`path:line imports name` for every import (any depth) of a forbidden top-level package
    by a module under `prefix`."""
    offenders = []
    for module, path in project_modules().items():
        if module == prefix or module.startswith(prefix + "."):
            offenders += [
                f"{path.relative_to(REPO)}:{line} imports {name}"
                for name, line in imported_names(module, path)
                if name.split(".")[0] in forbidden
            ]
    return sorted(set(offenders))


def test_relay_never_imports_ray_actors_driver_or_tune():
    offenders = layering_offenders("relay", {"ray", "actors", "relay_trainer", "driver", "tune"})
    assert not offenders, "relay is the pure library:\n" + "\n".join(offenders)


def test_actors_never_import_driver_or_tune():
    offenders = layering_offenders("actors", {"relay_trainer", "driver", "tune"})
    assert not offenders, "actors is plumbing under the loop:\n" + "\n".join(offenders)


def test_relay_trainer_never_imports_driver_or_tune():
    offenders = layering_offenders("relay_trainer", {"driver", "tune"})
    assert not offenders, "driver.py and tune.py are entry points over relay_trainer:\n" + "\n".join(offenders)


def test_relay_names_the_layer_above_only_in_its_lazy_exports():
    """relay/__init__.py may name relay_trainer's RayPPOTrainer (a string, imported on first use of
    the name); no other module of relay mentions a package above it."""
    mentions = [
        str(path.relative_to(REPO))
        for path in RELAY.rglob("*.py")
        if any(f"{above}." in path.read_text() for above in ("relay_trainer", "actors"))
    ]
    assert mentions == ["relay/__init__.py"], mentions
