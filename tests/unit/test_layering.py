"""`relay` is the pure library: it never imports ray (DESIGN.md, imports run one way)."""
import ast
import subprocess
import sys
from pathlib import Path

RELAY = Path(__file__).resolve().parents[2] / "relay"


def test_no_ray_import_statement_in_relay():
    offenders = []
    for path in RELAY.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path}: {n}" for n in names if n == "ray" or n.startswith("ray.")]
    assert not offenders, offenders


def test_importing_all_of_relay_does_not_load_ray():
    modules = [".".join(p.relative_to(RELAY.parent).with_suffix("").parts) for p in RELAY.rglob("*.py")]
    modules = [m.removesuffix(".__init__") for m in modules if not m.endswith("__main__")]
    code = "import importlib, sys\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules if "sglang" not in m and "vllm" not in m)
    code += "assert 'ray' not in sys.modules, sorted(k for k in sys.modules if k.startswith('ray'))[:5]\n"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=RELAY.parent)
