"""Taking a job's links from a page, in a parse process (never on the event loop).

Links come from ``<a href>``, ``<link rel=next>`` and ``<link rel=canonical>`` (a page's
canonical URL is one more link: already known, it is counted, not queued again), resolved
against the page's ``<base href>``, normalized as the queue normalizes every URL
(``normalize_url``), then kept when they are inside the job's scope, shorter than its URL length
limit, with no more query parameters than its limit (calendars, session ids and endless filter
permutations are cut there, and by the budgets), and taken by a rule (``rules``). ``rel=nofollow``
on a link, and ``<meta name=robots content=nofollow>`` on the page, are honoured unless the job
says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urljoin

from selectolax.lexbor import LexborHTMLParser, LexborNode

from forager.discovery.rules import LinkPolicy, Rule, matches
from forager.discovery.scope import in_scope
from forager.discovery.sitemaps import read_sitemap
from forager.errors import InvalidURL
from forager.queue.urls import Link, NormalizedURL, normalize_url

_FOLLOWED_RELS = ("next", "canonical")


def _rels(node: LexborNode) -> set[str]:
    return set((node.attributes.get("rel") or "").lower().split())


def _nofollow_page(tree: LexborHTMLParser) -> bool:
    for meta in tree.css('meta[name="robots" i]'):
        if "nofollow" in (meta.attributes.get("content") or "").lower():
            return True
    return False


def _hrefs(root: LexborNode, nofollow: bool) -> list[tuple[str, bool]]:
    """The hrefs of ``<a>`` (and rel=next/canonical ``<link>``) under ``root``, in order, each
    with whether it is ``rel=nofollow`` (always False when ``nofollow`` links are followed)."""
    found: list[tuple[str, bool]] = []
    for node in root.css("a[href], link[href]"):
        rels = _rels(node)
        if node.tag == "link" and not rels & set(_FOLLOWED_RELS):
            continue
        href = (node.attributes.get("href") or "").strip()
        if href and not href.startswith(("#", "javascript:", "mailto:", "tel:", "data:")):
            found.append((href, "nofollow" in rels and not nofollow))
    return found


@dataclass(frozen=True, slots=True)
class LinkFate:
    """What a job's policy makes of one link on a page: ``follow``, ``parse`` or ``ignore``
    (``rule``: the index of the rule that said so), or why it is not taken: ``no rule``,
    ``out of scope``, ``trap`` (over the URL length or query-parameter limit), ``nofollow`` or
    ``invalid`` (not a URL the queue accepts; ``url`` is then the href as written)."""

    url: str
    fate: str
    rule: int | None = None

    @property
    def taken(self) -> bool:
        return self.fate in ("follow", "parse")


def link_fates(html: str, page_url: str, policy: LinkPolicy) -> list[LinkFate]:
    """Every distinct link on the page and its fate, in page order: the one reading of a page's
    links, for the crawl (``extract_links``) and for a rule preview alike."""
    tree = LexborHTMLParser(html)
    root = tree.root
    if root is None:
        return []
    nofollow_ok = policy.follow_nofollow
    page_nofollow = not nofollow_ok and _nofollow_page(tree)
    base = page_url
    for node in tree.css("base[href]"):
        base = urljoin(page_url, node.attributes.get("href") or "")
        break
    everywhere = _hrefs(root, nofollow_ok)
    regions: dict[str, set[str]] = {}
    for rule in policy.rules:
        if rule.region is not None and rule.region not in regions:
            regions[rule.region] = {
                href
                for node in tree.css(rule.region)
                for href, nofollow in _hrefs(node, nofollow_ok)
                if not nofollow
            }
    fates: dict[str, tuple[int, LinkFate]] = {}  # by URL: where it first appears, its fate
    # Followable links first: a URL linked both with and without rel=nofollow is followed.
    ordered = sorted(enumerate(everywhere), key=lambda item: item[1][1])
    for at, (href, nofollow) in ordered:
        try:
            where = normalize_url(urljoin(base, href))
        except (InvalidURL, ValueError):  # urljoin: "Invalid IPv6 URL" and the like
            fates.setdefault(href, (at, LinkFate(href, "invalid")))
            continue
        if where.url_hash in fates:
            continue
        found = _fate(policy, regions, href, where.host, where.url, page_nofollow or nofollow)
        fates[where.url_hash] = (at, found)
    return [found for _, found in sorted(fates.values(), key=lambda item: item[0])]


def _fate(
    policy: LinkPolicy,
    regions: dict[str, set[str]] | None,
    href: str,
    host: str,
    url: str,
    nofollow: bool,
) -> LinkFate:
    if nofollow:
        return LinkFate(url, "nofollow")
    if not in_scope(policy.scope, policy.hosts, host):
        return LinkFate(url, "out of scope")
    if not _within_limits(policy, url):
        return LinkFate(url, "trap")
    action, index = _action(policy.rules, regions, href, url)
    return LinkFate(url, action or "no rule", index)


def _link(policy: LinkPolicy, where: NormalizedURL, found: LinkFate) -> Link:
    """A taken link, with its parse rule's recrawl schedule (if it has one)."""
    rule = None if found.rule is None else policy.rules[found.rule]
    return Link(where, found.fate, recrawl_seconds=rule.recrawl_seconds if rule else None)


def extract_links(html: str, page_url: str, policy: LinkPolicy) -> tuple[list[Link], int]:
    """The links ``policy``'s rules take from the page, and how many others it refused
    (``nofollow`` ones are passed over, not refused)."""
    links: list[Link] = []
    refused = 0
    for found in link_fates(html, page_url, policy):
        if found.taken:
            links.append(_link(policy, normalize_url(found.url), found))
        elif found.fate != "nofollow":
            refused += 1
    return links, refused


def given_links(
    hrefs: list[str], page_url: str, policy: LinkPolicy, known: tuple[Link, ...] = ()
) -> tuple[list[Link], int]:
    """The links a parser gave (a selector map's ``links`` rule, a plugin's ``Extracted.links``)
    through the same scope, trap limits and rules as the page's own — a rule's region aside:
    the parser chose where they come from. Those among ``known`` (the page's own) are dropped.
    """
    taken = {link.where.url_hash for link in known}
    links: list[Link] = []
    refused = 0
    for href in hrefs:
        try:
            where = normalize_url(urljoin(page_url, href))
        except (InvalidURL, ValueError):
            refused += 1
            continue
        if where.url_hash in taken:
            continue
        taken.add(where.url_hash)
        found = _fate(policy, None, href, where.host, where.url, False)
        if found.taken:
            links.append(_link(policy, where, found))
        else:
            refused += 1
    return links, refused


def sitemap_links(body: bytes, policy: LinkPolicy) -> tuple[list[Link], int]:
    """A sitemap's entries as links: an index's sitemaps are read in turn (``sitemap``), a
    urlset's pages go by the rules; the scope and the trap limits hold for both. Raises
    ``SitemapError`` for a sitemap that cannot be read safely."""
    sitemap = read_sitemap(body)
    links: list[Link] = []
    refused = 0
    for loc, lastmod in sitemap.entries:
        try:
            where = normalize_url(loc)
        except InvalidURL:
            refused += 1
            continue
        if not _allowed(policy, where.host, where.url):
            refused += 1
            continue
        action, index = (
            ("sitemap", None)
            if sitemap.kind == "sitemapindex"
            else _action(policy.rules, {}, loc, where.url)  # a region holds no sitemap URL
        )
        if action is None or action == "ignore":
            refused += 1
            continue
        recrawl = None if index is None else policy.rules[index].recrawl_seconds
        links.append(Link(where, action, _when(lastmod), recrawl))
    return links, refused


def _when(lastmod: str | None) -> datetime | None:
    """A W3C datetime (``2026-11-02``, ``2026-11-02T10:00:00Z`` …) in UTC; None if unreadable."""
    if not lastmod:
        return None
    try:
        when = datetime.fromisoformat(lastmod.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def robots_sitemap_links(urls: tuple[str, ...], policy: LinkPolicy) -> tuple[list[Link], int]:
    """The ``Sitemap:`` lines of a start host's robots.txt, as sitemaps of the job (in scope)."""
    links: list[Link] = []
    refused = 0
    for url in urls:
        try:
            where = normalize_url(url)
        except InvalidURL:
            refused += 1
            continue
        if _allowed(policy, where.host, where.url):
            links.append(Link(where, "sitemap"))
        else:
            refused += 1
    return links, refused


def _allowed(policy: LinkPolicy, host: str, url: str) -> bool:
    """In the job's scope and within its trap limits (URL length, query parameters)."""
    return in_scope(policy.scope, policy.hosts, host) and _within_limits(policy, url)


def _within_limits(policy: LinkPolicy, url: str) -> bool:
    return len(url) <= policy.max_url_length and _query_params(url) <= policy.max_query_params


def _query_params(url: str) -> int:
    _, _, query = url.partition("?")
    return len(query.split("&")) if query else 0


def _action(
    rules: tuple[Rule, ...], regions: dict[str, set[str]] | None, href: str, url: str
) -> tuple[str | None, int | None]:
    """The first rule that matches ``url`` and whose region holds the link says what it is
    (and its index); with no ``regions`` (a parser's links) a rule's region is not asked."""
    for i, rule in enumerate(rules):
        if (
            regions is not None
            and rule.region is not None
            and href not in regions.get(rule.region, ())
        ):
            continue
        if matches(rule, url):
            return rule.action, i
    return None, None
