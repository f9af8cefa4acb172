"""The text window around the heading, walked from the heading, equals a walk of the whole page."""

from __future__ import annotations

import random
from collections import deque

import pytest
from selectolax.lexbor import LexborHTMLParser, LexborNode

from forager.parse import benchmark, visible
from forager.parse.accuracy import PAGES

_INVISIBLE = {"script", "style", "noscript", "template", "title", "head"}


def _reference(
    body: LexborNode, heading: LexborNode | None, reach: int, back: int
) -> tuple[list[int], int]:
    """The window as a walk from the top of the page finds it (the pre-v4 algorithm)."""
    before: deque[int] = deque(maxlen=back) if back else deque(maxlen=0)
    after: list[int] = []
    started = heading is None
    for node in body.traverse(include_text=True):
        if not node.is_text_node:
            started = started or (heading is not None and node.mem_id == heading.mem_id)
            continue
        parent = node.parent
        if parent is None or parent.tag in _INVISIBLE:
            continue
        if not started:
            before.append(node.mem_id)
        else:
            after.append(node.mem_id)
            if len(after) >= reach:
                break
    return [*before, *after], len(before)


def _random_page(seed: int) -> str:
    rng = random.Random(seed)
    tags = ["div", "span", "p", "ul", "li", "section", "b", "script", "style"]

    def block(depth: int) -> str:
        parts = []
        for _ in range(rng.randint(0, 4)):
            choice = rng.random()
            if choice < 0.4 or depth > 5:
                parts.append(rng.choice(["€ 9,90", "Sold out", " ", "\n", "SKU: A1", "text"]))
            elif choice < 0.5 and depth > 1:
                parts.append(f"<h1>Lamp {rng.randint(0, 3)}</h1>")
            else:
                tag = rng.choice(tags)
                parts.append(f"<{tag}>{block(depth + 1)}</{tag}>")
        return "".join(parts)

    return f"<html><head><title>Lamp 1</title></head><body>{block(0)}</body></html>"


@pytest.mark.parametrize("seed", range(60))
def test_window_matches_a_walk_from_the_top(seed: int) -> None:
    tree = LexborHTMLParser(_random_page(seed))
    body = tree.body
    assert body is not None
    heading = visible.main_heading(tree, ["Lamp 1"])
    for reach, back in ((400, 60), (5, 3), (150, 0), (1, 1)):
        nodes, start = visible._window(body, heading, reach, back)
        assert ([n.mem_id for n in nodes], start) == _reference(body, heading, reach, back)


def test_window_on_the_benchmark_dev_pages() -> None:
    truth, _ = benchmark.load(PAGES)
    names = [n for n in sorted(truth) if benchmark.half_of(n) == "dev"]
    if not names:
        pytest.skip(f"no benchmark pages under {PAGES}")
    for name in names:
        html = (benchmark.folder(PAGES) / name).read_text(encoding="utf-8", errors="replace")
        tree = LexborHTMLParser(html)
        title = tree.css_first("title")
        heading = visible.main_heading(tree, [title.text()] if title is not None else [])
        assert tree.body is not None
        for reach, back in ((400, 60), (150, 0)):
            nodes, start = visible._window(tree.body, heading, reach, back)
            assert ([n.mem_id for n in nodes], start) == _reference(
                tree.body, heading, reach, back
            ), name
