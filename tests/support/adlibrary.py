"""The test site's ad library: paginated ads with dates, media types and languages.

``/ads?start=2026-01-15&end=2026-01-15&format=video&languages=pt,en&sort=qtd_ads&page=1``
lists the matching ads, 25 a page, with ``Page N of M`` and a ``rel="next"`` link, as a public
ad library does. Ads are deterministic: ad ``i`` of day ``d`` has id ``YYYYMMDD-iiii``, a video
when ``i`` is even, language ``pt``/``en``/``es`` by ``i % 3``. How many ads a day has, and how
many of them carry an id too long for the ``ads`` table (for writer failures), is set per test.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import date, timedelta

PAGE_SIZE = 25
MAX_DAYS = 366
LANGUAGES = ("pt", "en", "es")
FORMATS = ("all", "video", "image")


@dataclass(frozen=True, slots=True)
class Ad:
    id: str
    page_name: str
    body: str
    media_type: str
    language: str
    start_date: date
    qtd_ads: int


class BadQuery(ValueError):
    """A query the ad library cannot answer (shown as 400)."""


def ad(day: date, i: int, *, long_id: bool = False) -> Ad:
    ad_id = f"{day:%Y%m%d}-{i:04d}"
    if long_id:
        ad_id += "-" + "x" * 120  # over the 100 characters of ads.id
    return Ad(
        ad_id,
        f"Advertiser {i % 17}",
        f"Offer {i} of {day.isoformat()}: everything must go.",
        "video" if i % 2 == 0 else "image",
        LANGUAGES[i % 3],
        day,
        (i * 37) % 97 + 1,
    )


@dataclass
class AdSettings:
    per_day: int = 40
    bad_per_day: int = 0  # the first N ads of each day get an over-long id
    days: dict[date, int] | None = None  # per-day counts overriding per_day

    def count(self, day: date) -> int:
        return (self.days or {}).get(day, self.per_day)


def query(
    settings: AdSettings, start: date, end: date, media: str, languages: list[str]
) -> list[Ad]:
    if end < start or (end - start).days >= MAX_DAYS:
        raise BadQuery("end must be on or after start, within a year")
    if media not in FORMATS:
        raise BadQuery(f"format must be one of {FORMATS}")
    found = []
    for n in range((end - start).days + 1):
        day = start + timedelta(days=n)
        for i in range(settings.count(day)):
            item = ad(day, i, long_id=i < settings.bad_per_day)
            if media != "all" and item.media_type != media:
                continue
            if languages and item.language not in languages:
                continue
            found.append(item)
    return sorted(found, key=lambda a: (-a.qtd_ads, a.id))


def _article(item: Ad) -> str:
    e = html.escape
    media = (
        f'<video src="/img/{e(item.id)}.mp4"></video>'
        if item.media_type == "video"
        else (f'<img src="/img/{e(item.id)}.jpg" alt="">')
    )
    return f"""<article class="ad" data-ad-id="{e(item.id)}">
  <h2 class="page-name">{e(item.page_name)}</h2>
  <p class="body">{e(item.body)}</p>
  <span class="media" data-type="{item.media_type}">{media}</span>
  <span class="lang" lang="{item.language}">{item.language}</span>
  <time class="start" datetime="{item.start_date.isoformat()}">{item.start_date:%d %b %Y}</time>
  <span class="qtd">{item.qtd_ads} ads use this creative</span>
  <a class="landing" href="/landing/{e(item.id)}">Learn more</a>
</article>"""


def page_html(ads: list[Ad], page: int, next_url: str | None) -> str:
    pages = max(1, -(-len(ads) // PAGE_SIZE))
    shown = ads[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
    nav = f'<a rel="next" href="{html.escape(next_url)}">Next</a>' if next_url else ""
    articles = "\n".join(_article(a) for a in shown)
    summary = f"{len(ads)} ads · Page {page} of {pages}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Ad library</title></head>
<body>
<h1>Ad library</h1>
<p class="summary" data-total="{len(ads)}" data-pages="{pages}">{summary}</p>
<section class="results">
{articles}
</section>
<nav class="pager">{nav}</nav>
</body></html>"""
