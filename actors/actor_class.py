"""Actor classes the driver can start without importing them.

`ray.remote(cls)` needs the class object in the driver, and importing actors/learner.py (or the
rollout worker, the critic, ...) imports torch and the model code: about 330 MB and a good part of
the driver's start-up, for classes whose code only ever runs in the actors. `actor_class` builds a
stand-in with the same method names, read from the module's source (no import), each forwarding
to the real object, which the actor process builds in `__init__`. The handle reads as before
(`learner.update.remote(...)`), the dashboard shows the real class name and `__repr__`.

The real class must be a plain class (no base classes): its methods are the `def`s in its body.
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
    for fn_name, is_generator in _methods(module, name):
        methods[fn_name] = _generator_method(fn_name) if is_generator else _method(fn_name)

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


def _methods(module: str, name: str) -> list[tuple[str, bool]]:
    """(name, is a generator) of each method `def`ined in the class body, read from the source."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ImportError(f"actor class {module}.{name}: no module {module}")
    with open(spec.origin, encoding="utf-8") as f:
        tree = ast.parse(f.read(), spec.origin)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            if node.bases:
                raise TypeError(f"actor class {module}.{name}: a plain class is needed, it has base classes")
            return [
                (fn.name, _yields(fn))
                for fn in node.body
                if isinstance(fn, ast.FunctionDef)
                and not (fn.name.startswith("__") and fn.name.endswith("__"))
                and not any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)
            ]
    raise ImportError(f"actor class {module}.{name}: no class {name} in {spec.origin}")


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
