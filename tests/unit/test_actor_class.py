"""relay_trainer/actor_class.py: the stand-in an actor class is started by carries the methods of the
class and of its bases, read from their sources: a base in the same module, one imported from
another (absolute or relative), a base's base. The real class's module is never imported."""

import inspect
import sys
import textwrap

import pytest

from relay_trainer.actor_class import actor_class


@pytest.fixture
def package(tmp_path, monkeypatch):
    """Writes modules of a fresh package (its own name per test: actor_class caches by name)."""
    name = f"standin_{len(sys.modules)}_{id(tmp_path) % 10**6}"
    folder = tmp_path / name
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(module: str, source: str) -> str:
        (folder / f"{module}.py").write_text(textwrap.dedent(source))
        return f"{name}.{module}"

    return write


def public(cls) -> set[str]:
    return {m for m in vars(cls) if not m.startswith("__")}


def test_methods_come_from_the_class_and_every_base_without_importing_it(package):
    package(
        "bases",
        """
        class Root:
            def node(self):
                return "root"

        class Middle(Root):
            def listen(self):
                return "middle"

            def stream(self):
                return "not a generator here"
        """,
    )
    module = package(
        "role",
        """
        raise RuntimeError("imported")  # the driver never imports an actor's module
        from .bases import Middle as Base

        class Local:
            def local(self):
                pass

        class Role(Base, Local):
            def work(self):
                pass

            def stream(self):
                yield 1

            def __repr__(self):
                return "role"

            @property
            def shown(self):
                return 1
        """,
    )
    shell = actor_class(module, "Role")
    assert public(shell) == {"node", "listen", "stream", "local", "work"}
    assert shell.__relay_actor__ == (module, "Role")
    assert inspect.isgeneratorfunction(shell.stream)  # the class's own definition wins over its base's
    assert module not in sys.modules


def test_a_base_that_cannot_be_found_in_the_source_is_named(package):
    module = package(
        "odd",
        """
        import collections

        class Unknown(Mystery):
            pass

        class Dotted(collections.UserDict):
            pass
        """,
    )
    with pytest.raises(TypeError, match="base Mystery: neither defined in nor imported by name into"):
        actor_class(module, "Unknown")
    with pytest.raises(TypeError, match=r"base collections.UserDict is not a plain name"):
        actor_class(module, "Dotted")
    with pytest.raises(ImportError, match="no class Absent"):
        actor_class(module, "Absent")


def test_a_methods_rank_group_declaration_is_read_from_the_source(package):
    module = package(
        "ranked",
        """
        raise RuntimeError("imported")
        from actors.plumbing import on_rank_group

        class Role:
            @on_rank_group("every_rank")
            def update(self):
                pass

            @on_rank_group("rank_zero")
            def listen(self):
                pass

            def plain(self):
                pass

        class Bad:
            @on_rank_group(HOW)
            def update(self):
                pass
        """,
    )
    shell = actor_class(module, "Role")
    assert (shell.update.rank_group, shell.listen.rank_group) == ("every_rank", "rank_zero")
    assert not hasattr(shell.plain, "rank_group")
    with pytest.raises(TypeError, match="on_rank_group takes one string literal"):
        actor_class(module, "Bad")
