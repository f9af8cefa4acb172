"""Issue 31: every exception Forager defines is a ``ForagerError`` and on the drawing of the
tree in ``forager/errors.py``, under the parent it has; the module-private signals stay out of
both, and the drawing names them."""

from __future__ import annotations

import importlib
import pkgutil
import re

import forager
from forager import errors


def _exception_classes() -> list[type[BaseException]]:
    found = []
    for info in pkgutil.walk_packages(forager.__path__, "forager."):
        if info.name.startswith("forager.db.migrations."):  # Alembic's scripts, not modules
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
            ):
                found.append(value)
    return found


def _drawn_parents() -> dict[str, str]:
    """``{class: parent}`` as the drawing shows them (four columns a level)."""
    parents: dict[str, str] = {}
    level_names = ["ForagerError"]
    for line in (errors.__doc__ or "").splitlines():
        m = re.match(r"([│ ]*)[├└]── (\w+)", line)
        if m:
            depth = len(m.group(1)) // 4
            del level_names[depth + 1 :]
            parents[m.group(2)] = level_names[depth]
            level_names.append(m.group(2))
    return parents


def test_every_exception_is_in_the_tree_and_on_its_drawing() -> None:
    found = _exception_classes()
    public = [c for c in found if not c.__name__.startswith("_")]
    assert len(public) > 25  # the walk found the modules, not just errors.py
    assert [c.__name__ for c in public if not issubclass(c, errors.ForagerError)] == []
    parents = _drawn_parents()
    drawn_wrong = {
        c.__name__: parents.get(c.__name__)
        for c in public
        if c is not errors.ForagerError and parents.get(c.__name__) != c.__mro__[1].__name__
    }
    assert drawn_wrong == {}
    private = {c.__name__ for c in found if c.__name__.startswith("_")}
    assert private <= set(re.findall(r"``(_\w+)``", errors.__doc__ or ""))
