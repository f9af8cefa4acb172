"""The queue has one front door (issue 31): outside ``forager/queue/``, code imports the door
(``forager.queue.door``) and the four modules that only read or compute, never the queue's
inner modules, so a change to the task lifecycle is made in ``queue/`` alone."""

from __future__ import annotations

import ast
from pathlib import Path

import forager

ROOT = Path(forager.__file__).parent
QUEUE = "forager.queue"
# What code outside queue/ may import from it: the door, and modules that move nothing.
OPEN = frozenset(f"{QUEUE}.{name}" for name in ("door", "lifecycle", "urls", "counts", "adaptive"))


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def queue_imports(source: str, module: str, is_package: bool = False) -> list[str]:
    """The ``forager.queue`` modules ``source`` (the text of ``module``) imports, wherever the
    import stands (top level or inside a function), absolute or relative."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from forager.queue import moves`` imports the module forager.queue.moves.
            names = [f"{base}.{a.name}" if base == QUEUE else base for a in node.names]
        else:
            continue
        found += [n for n in names if n == QUEUE or n.startswith(f"{QUEUE}.")]
    return found


def test_only_the_door_and_read_only_modules_are_imported_from_outside_the_queue() -> None:
    reached: dict[str, set[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        module = _module(path)
        if module == QUEUE or module.startswith(f"{QUEUE}."):
            continue
        text = path.read_text(encoding="utf-8")
        for target in queue_imports(text, module, path.name == "__init__.py"):
            if target not in OPEN:
                reached.setdefault(module, set()).add(target)
    assert reached == {}, f"past the queue's door (import forager.queue.door instead): {reached}"


def test_the_door_is_the_queue_module_callers_find() -> None:
    # The door's old name (``store``, which also names the page store) is gone, not shimmed.
    assert not (ROOT / "queue" / "store.py").exists()
    assert (ROOT / "queue" / "door.py").exists()


def test_every_way_of_importing_an_inner_module_is_seen() -> None:
    source = "\n".join(
        [
            "from forager.queue import moves, door",
            "import forager.queue.claim",
            "from forager.queue.scheduler import reap_expired_leases",
            "from ..queue import dispatch",
            "from ..queue.attempts import FetchAttempt",
            "def later():",
            "    from forager.queue.admin import pause",
            "from forager.queue.lifecycle import TaskStatus",
            "from forager.queuing import unrelated",
        ]
    )
    seen = queue_imports(source, "forager.worker.pipeline")
    assert [s for s in seen if s not in OPEN] == [
        "forager.queue.moves",
        "forager.queue.claim",
        "forager.queue.scheduler",
        "forager.queue.dispatch",
        "forager.queue.attempts",
        "forager.queue.admin",
    ]
