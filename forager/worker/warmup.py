"""The parse processes' fork server, started before the rest of a command's start-up.

``ParsePool`` starts it when the first page is fetched otherwise, and then that page, and
every page fetched meanwhile, waits for the server to import the parsers (~0.5 s on a 2-core
VM). A command that will parse (``crawl``, ``worker``) starts it first thing instead: the server
imports the parsers on the other core while the command imports everything else.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from multiprocessing import forkserver
from typing import Any

# The modules the fork server imports once, so each parse process starts with them loaded.
# ``FORAGER_PARSER_MODULES`` are imported by each parse process itself (see ``ParsePool``).
PRELOAD = (
    "forager.worker.parsing",  # the children's own module
    "forager.parse.registry",
    "forager.parse.generic",
    "forager.parse.amazon",
    "forager.parse.selectors",
    "forager.parse.preload",  # builds the CLDR currency tables once, before the children fork
    "forager.discovery.links",  # a crawl job's links
)


def fork_context(preload: Sequence[str] = PRELOAD) -> Any:
    """The fork-server context, told what its server imports when it starts (once started,
    a server keeps what it has imported)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(preload))
    return ctx


def start_fork_server() -> None:
    """Start the fork server now (it imports ``PRELOAD`` in the background); a no-op when it
    runs already."""
    fork_context()
    forkserver.ensure_running()
