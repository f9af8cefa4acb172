"""Whether a page's product data appears only once its scripts run (fetcher escalation).

Asked in the parse processes about a page fetched without a browser on which the parse found no
product, or no price. The answer is the evidence, in words, that a browser would see more, or
None. A page qualifies only when it has a script that runs — not JSON-LD or another data block:
without one no browser shows more than was served — and, besides, one of these marks of a page
that a script fills in:

- a price slot with no amount in it: an element whose ``itemprop``, class or id names a price,
  holding no digit ("Loading price…", or nothing);
- the empty mount point of a client-side app (``#root``, ``#app``, ``#__next``, ``[ng-app]`` …);
- a ``<noscript>`` asking for JavaScript;
- the state a client-side app is built from (``__NEXT_DATA__``, ``window.__INITIAL_STATE__`` …);
- next to no visible text in the body.

Each is common to pages rendered in the browser, and none alone makes the browser fetch stick:
the worker keeps the browser for a domain only when the browser's page then has the product.
"""

from __future__ import annotations

import re

from selectolax.lexbor import LexborHTMLParser, LexborNode

# Script types a browser runs (an absent type is JavaScript).
_RUNNABLE = {"", "text/javascript", "application/javascript", "module", "text/ecmascript"}
_PRICE_SLOTS = '[itemprop="price"], [class*="price" i], [id*="price" i]'
_APP_ROOTS = (
    "#root, #app, #__next, #__nuxt, #___gatsby, #svelte, #main-app, "
    "[data-reactroot], [ng-app], [ng-version], [data-v-app], app-root"
)
_NOSCRIPT_ASKS = re.compile(r"javascript|enable js|js (?:is )?(?:required|disabled)", re.I)
_APP_STATE = re.compile(
    r"__NEXT_DATA__|__NUXT__|__INITIAL_STATE__|__PRELOADED_STATE__|__APOLLO_STATE__"
    r"|__remixContext|ng-state"
)
_DIGIT = re.compile(r"\d")
_FEW_WORDS = 200  # characters of visible body text below which a page is a shell
_SHOWN = 40  # characters of a slot's text quoted in the reason


def needs_scripts(html: str) -> str | None:
    """Why ``html`` looks filled in by its scripts (None: it does not, or it runs none)."""
    tree = LexborHTMLParser(html)
    scripts = tree.css("script")
    if not any(_runs(s) for s in scripts):
        return None
    for slot in tree.css(_PRICE_SLOTS):
        if slot.tag in ("script", "style", "meta", "link", "input", "body", "html"):
            continue
        text = " ".join((slot.text(deep=True) or "").split())
        if not _DIGIT.search(text) and not _DIGIT.search(slot.attributes.get("content") or ""):
            return f"a price slot with no amount until scripts run ({_describe(slot, text)})"
    for root in tree.css(_APP_ROOTS):
        if not (root.text(deep=True) or "").strip() and root.child is None:
            return f"an empty app mount point ({_describe(root, '')})"
    for note in tree.css("noscript"):
        if _NOSCRIPT_ASKS.search(note.text(deep=True) or ""):
            return "a <noscript> asking for JavaScript"
    if any(_APP_STATE.search(s.text() or "") or _APP_STATE.search(s.id or "") for s in scripts):
        return "a client-side app's state in a script"
    body = tree.body
    if body is not None:
        for node in body.css("script, style, noscript, template"):
            node.decompose()
        if len(" ".join((body.text(deep=True) or "").split())) < _FEW_WORDS:
            return "next to no text without its scripts"
    return None


def _runs(script: LexborNode) -> bool:
    kind = (script.attributes.get("type") or "").strip().lower()
    return kind in _RUNNABLE


def _describe(node: LexborNode, text: str) -> str:
    """``tag#id.class: "text"``, short."""
    name = node.tag or "element"
    if node.id:
        name += f"#{node.id}"
    classes = (node.attributes.get("class") or "").split()
    if classes:
        name += "." + ".".join(classes[:2])
    return f'{name}: "{text[:_SHOWN]}"' if text else f"{name}: empty"
