"""Hostile pages for the parsers: most took seconds to minutes (or crashed) before issue 11.

Built in the process that parses them (``python -m tests.parse.adversarial_pages NAME``), so a
test can give that process a time budget and kill it when the budget runs out: the regex engine
does not return to Python while it backtracks, so no in-process timeout could stop it.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

from forager.errors import ParseError

_PRODUCT_WITHOUT_NAME = (
    '<script type="application/ld+json">{"@type": "Product", '
    '"offers": {"price": "10.00", "priceCurrency": "EUR"}}</script>'
)


def _json_ld(data: object) -> str:
    return f'<script type="application/ld+json">{json.dumps(data)}</script>'


def _spaces_in_title() -> str:
    return f"<html><head><title>a{' ' * 200_000}b</title>{_PRODUCT_WITHOUT_NAME}</head></html>"


def _spaces_in_json_ld_name() -> str:
    product = {"@type": "Product", "name": f"a{' ' * 200_000}-", "offers": {"price": "1"}}
    return f"<html><head><title>x</title>{_json_ld(product)}</head><body></body></html>"


def _less_than_runs() -> str:
    product = {"@type": "Product", "name": "<" * 200_000, "description": "<" * 200_000}
    return f"<html><head>{_json_ld(product)}</head><body>{'&lt;' * 100_000}</body></html>"


def _repeated_title_tags() -> str:
    return "<title" * 1_000_000


def _deep_nesting() -> str:
    level = f'<div itemprop="offers" class="x"><button>Add to cart</button><p>{"words " * 20}</p>'
    opening = level * 10_000
    product = '<div itemscope itemtype="https://schema.org/Product"><h1 itemprop="name">X</h1>'
    return f"<html><body>{product}{opening}{'</div>' * 10_001}</body></html>"


def _one_character(char: str) -> Callable[[], str]:
    return lambda: char * 10_000_000


def _big_json_ld() -> str:
    offers = [{"@type": "Offer", "price": f"{n}.99", "sku": str(n)} for n in range(60_000)]
    product = {"@type": "Product", "name": "Big", "offers": offers, "sku": "1 " * 500_000}
    return f"<html><head>{_json_ld(product)}</head><body><h1>Big</h1></body></html>"


def _deep_json_ld() -> str:
    return f'<html><head><script type="application/ld+json">{"[" * 200_000}</script></head></html>'


def _huge_attributes() -> str:
    value = "related " * 500_000
    return (
        f'<html><head><meta property="og:title" content="{value}">'
        f'<meta property="og:type" content="product"></head><body>'
        f'<div class="{value}"><img alt="{value}" src="{value}"><h1>{value[:1000]}</h1>'
        f'<button title="{value}">{value}</button></div></body></html>'
    )


def _price_like_runs() -> str:
    number = "1" + " 111" * 300_000
    product = {"@type": "Product", "name": "N", "offers": {"price": number}}
    whole = '<span class="a-price-whole">1' + " ." * 100_000 + "</span>"
    return (
        f"<html><head>{_json_ld(product)}</head><body><h1 id='productTitle'>N</h1>"
        f'<div id="corePrice_feature_div"><span class="a-price">{whole}</span></div>'
        f"<span>{number[:39]}</span></body></html>"
    )


PAGES: dict[str, Callable[[], str]] = {
    "spaces-in-title": _spaces_in_title,
    "spaces-in-json-ld-name": _spaces_in_json_ld_name,
    "less-than-runs": _less_than_runs,
    "repeated-title-tags": _repeated_title_tags,
    "deep-nesting": _deep_nesting,
    "10mb-of-a": _one_character("a"),
    "10mb-of-spaces": _one_character(" "),
    "10mb-of-less-than": _one_character("<"),
    "10mb-of-digits": _one_character("1"),
    "5mb-json-ld": _big_json_ld,
    "deep-json-ld": _deep_json_ld,
    "huge-attributes": _huge_attributes,
    "price-like-runs": _price_like_runs,
}


def main(name: str) -> None:
    """Parse page ``name`` with every parser and the classifier; print what each one did."""
    from forager.parse.classify import classify, looks_like_product
    from forager.parse.registry import get_parser, parser_names

    html = PAGES[name]()
    targets: list[tuple[str, Callable[[], object]]] = [
        ("classify", lambda: classify(html)),
        ("looks_like_product", lambda: looks_like_product(html)),
    ]
    for parser in parser_names():
        targets.append(
            (parser, lambda p=parser: get_parser(p).parse(html, "https://shop.example/"))
        )
    for target, run in targets:
        print(f"start {target}", flush=True)
        started = time.process_time()
        try:
            run()
            outcome = "ok"
        except ParseError as exc:
            outcome = type(exc).__name__
        print(f"done {target} {outcome} {time.process_time() - started:.2f}s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
