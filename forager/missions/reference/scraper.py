"""Mission scrapers for the reference worker service. One ships: ``ad-library``, which reads
an ad library's paginated listing (the format of the local test site's ``/ads``).

A scraper gets the session's HTTP client (it goes through the session's proxy), the target
site and the scrape filters of seed §9.1, and reports progress as it pages.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol
from urllib.parse import urlencode, urljoin

import httpx
from selectolax.lexbor import LexborHTMLParser as HTMLParser
from selectolax.lexbor import LexborNode as Node

from forager.errors import ForagerError

Progress = Callable[[int, float], Awaitable[None]]
MAX_PAGES = 10_000


class ScrapeFailed(ForagerError):
    """The target answered something the scraper cannot use."""


class Scraper(Protocol):
    async def scrape(
        self, client: httpx.AsyncClient, target: str, filters: dict[str, Any], progress: Progress
    ) -> list[dict[str, Any]]: ...


def _text(node: Node | None) -> str | None:
    if node is None:
        return None
    text = node.text(strip=True)
    return text or None


def _count(text: str | None) -> int | str | None:
    """``12 ads use this creative`` → 12; anything else is kept as written."""
    if text is None:
        return None
    head = text.split(" ", 1)[0]
    return int(head) if head.isdigit() else text


def read_ad(article: Node) -> dict[str, Any]:
    """One ``article.ad`` as the record the writer stores in ``ads``."""
    media = article.css_first(".media")
    lang = article.css_first(".lang")
    start = article.css_first("time.start")
    landing = article.css_first("a.landing")
    media_src = None
    if media is not None:
        tag = media.css_first("video, img")
        media_src = tag.attributes.get("src") if tag is not None else None
    return {
        "id": article.attributes.get("data-ad-id"),
        "page_name": _text(article.css_first(".page-name")),
        "body": _text(article.css_first(".body")),
        "media_type": media.attributes.get("data-type") if media is not None else None,
        "language": lang.attributes.get("lang") if lang is not None else None,
        "start_date": start.attributes.get("datetime") if start is not None else None,
        "qtd_ads": _count(_text(article.css_first(".qtd"))),
        "landing_url": landing.attributes.get("href") if landing is not None else None,
        "media_url": media_src,
    }


class AdLibraryScraper:
    """Pages through ``{target}/ads?…`` until there is no ``rel=next`` link."""

    async def scrape(
        self, client: httpx.AsyncClient, target: str, filters: dict[str, Any], progress: Progress
    ) -> list[dict[str, Any]]:
        dates = filters["date_range"]
        query = {
            "start": dates["start"],
            "end": dates["end"],
            "format": filters.get("format", "all"),
            "languages": ",".join(filters.get("languages", [])),
            "sort": filters.get("sort_by", "qtd_ads"),
        }
        url: str | None = f"{target.rstrip('/')}/ads?{urlencode(query)}"
        ads: list[dict[str, Any]] = []
        pages_read = 0
        while url is not None and pages_read < MAX_PAGES:
            answer = await client.get(url)
            if answer.status_code != 200:
                raise ScrapeFailed(f"the ad library answered HTTP {answer.status_code}")
            tree = HTMLParser(answer.text)
            summary = tree.css_first(".summary")
            if summary is None:
                raise ScrapeFailed("not an ad library page")
            pages = int(summary.attributes.get("data-pages") or 1)
            for article in tree.css("article.ad"):
                record = read_ad(article)
                record["landing_url"] = urljoin(url, record["landing_url"] or "") or None
                record["media_url"] = urljoin(url, record["media_url"] or "") or None
                ads.append(record)
            pages_read += 1
            await progress(len(ads), round(100.0 * pages_read / max(pages, 1), 1))
            following = tree.css_first('a[rel="next"]')
            href = following.attributes.get("href") if following is not None else None
            url = urljoin(url, href) if href else None
        return ads


SCRAPERS: dict[str, Callable[[], Scraper]] = {"ad-library": AdLibraryScraper}
