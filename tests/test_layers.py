"""Issue 31: a fetcher only fetches. No module of ``forager.fetch`` imports the database or the
politeness package, directly or through another module; politeness sits between the queue and
proxies and reaches no package above it (``make lint`` checks the same with import-linter; this
says it in the suite)."""

from __future__ import annotations

import grimp
import pytest


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("forager", cache_dir=None)


def _chains(graph: grimp.ImportGraph, importer: str, imported: str) -> list[str]:
    found = graph.find_shortest_chains(importer=importer, imported=imported, as_packages=True)
    return sorted(" → ".join(chain) for chain in found)


@pytest.mark.parametrize("forbidden", ["forager.db", "forager.politeness"])
def test_fetch_imports_neither_the_database_nor_politeness(
    graph: grimp.ImportGraph, forbidden: str
) -> None:
    assert _chains(graph, "forager.fetch", forbidden) == []


@pytest.mark.parametrize("above", ["forager.queue", "forager.worker", "forager.domains"])
def test_politeness_reaches_nothing_above_it(graph: grimp.ImportGraph, above: str) -> None:
    assert _chains(graph, "forager.politeness", above) == []


def test_proxies_sit_below_politeness(graph: grimp.ImportGraph) -> None:
    assert _chains(graph, "forager.proxies", "forager.politeness") == []
