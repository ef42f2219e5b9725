"""Actor classes the driver can start without importing them.

`ray.remote(cls)` needs the class object in the driver, and importing actors/learner.py (or the
rollout worker, the critic, ...) imports torch and the model code: about 330 MB and a good part of
the driver's start-up, for classes whose code only ever runs in the actors. `actor_class` builds a
stand-in with the same method names, read from the module's source (no import), each forwarding
to the real object, which the actor process builds in `__init__`. The handle reads as before
(`learner.update.remote(...)`), the dashboard shows the real class name and `__repr__`.

The methods are the `def`s in the class body and in its base classes' bodies, each base found
through the module's own imports (`from actors.plumbing import RelayActor`) or in the module
itself, and read from its source in turn: a base may live in a module that imports torch. A
method's `@on_rank_group(...)` declaration (actors/plumbing.py) is read too, and carried on the
stand-in's method as on the real one, so a RankGroup of the stand-in fans out as declared.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from functools import cache


@cache
def actor_class(module: str, name: str) -> type:
    """A stand-in for `module.name` with its methods, for ray.remote in a process without `module`."""
    methods = {}
    for fn_name, (is_generator, rank_group) in _methods(module, name).items():
        methods[fn_name] = _generator_method(fn_name) if is_generator else _method(fn_name)
        if rank_group is not None:
            methods[fn_name].rank_group = rank_group

    def __init__(self, *args, **kwargs):
        self._actor = getattr(importlib.import_module(module), name)(*args, **kwargs)

    def __repr__(self) -> str:  # the dashboard's Repr column; before the constructor ends, the name
        actor = self.__dict__.get("_actor")
        return name if actor is None else repr(actor)

    def __getattr__(self, attr: str):  # the real object's attributes: `__ray_call__` functions read them
        actor = self.__dict__.get("_actor")
        if actor is None:
            raise AttributeError(attr)
        return getattr(actor, attr)

    attributes = {
        "__init__": __init__,
        "__repr__": __repr__,
        "__getattr__": __getattr__,
        "__doc__": f"{module}.{name}, started by name",
    }
    return type(name, (), {**attributes, "__relay_actor__": (module, name), **methods})


def _methods(module: str, name: str) -> dict[str, tuple[bool, str | None]]:
    """{name: (is a generator, its on_rank_group declaration or None)} of each method `def`ined in
    the class body or its bases' bodies, read from the source; the class's own definition wins over
    a base's, an earlier base's over a later one's (Python's order for classes without shared bases)."""
    tree = _source(module)
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if node is None:
        raise ImportError(f"actor class {module}.{name}: no class {name} in module {module}")
    found: dict[str, tuple[bool, str | None]] = {}
    for base in reversed(node.bases):
        if not isinstance(base, ast.Name):
            raise TypeError(f"actor class {module}.{name}: base {ast.unparse(base)} is not a plain name")
        found.update(_methods(*_defined_at(tree, module, base.id)))
    for fn in node.body:
        if (
            isinstance(fn, ast.FunctionDef)
            and not (fn.name.startswith("__") and fn.name.endswith("__"))
            and not any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)
        ):
            found[fn.name] = _yields(fn), _rank_group(fn, f"{module}.{name}")
    return found


def _rank_group(fn: ast.FunctionDef, where: str) -> str | None:
    """The string of the method's `@on_rank_group("...")`, or None without one."""
    for decorator in fn.decorator_list:
        if isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "on_rank_group":
            args = decorator.args
            if len(args) != 1 or not isinstance(args[0], ast.Constant) or not isinstance(args[0].value, str):
                raise TypeError(f"actor class {where}.{fn.name}: on_rank_group takes one string literal")
            return args[0].value
    return None


@cache
def _source(module: str) -> ast.Module:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ImportError(f"actor class: no module {module}")
    with open(spec.origin, encoding="utf-8") as f:
        return ast.parse(f.read(), spec.origin)


def _defined_at(tree: ast.Module, module: str, name: str) -> tuple[str, str]:
    """(module, class name) of the class that `name` means in `module`: one of its own, or one it imports."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return module, name
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    source = importlib.util.resolve_name(
                        "." * node.level + (node.module or ""), module.rpartition(".")[0]
                    )
                    return source, alias.name
    raise TypeError(f"actor class base {name}: neither defined in nor imported by name into {module}")


def _yields(fn: ast.FunctionDef) -> bool:
    """A yield in the function's own body (not in a function nested in it)."""
    todo = list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Yield | ast.YieldFrom):
            return True
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            todo.extend(ast.iter_child_nodes(node))
    return False


def _method(fn_name: str):
    def forward(self, *args, **kwargs):
        return getattr(self._actor, fn_name)(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = fn_name
    return forward


def _generator_method(fn_name: str):
    def forward(self, *args, **kwargs):  # a generator itself: Ray streams its items (num_returns="streaming")
        yield from getattr(self._actor, fn_name)(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = fn_name
    return forward
