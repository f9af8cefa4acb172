"""A complete Forager parser plugin: the book pages of books.toscrape.com (a public sandbox
made for scraping practice). See Forager's docs/PARSERS.md for the contract it keeps."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from urllib.parse import urljoin

from selectolax.lexbor import LexborHTMLParser

from forager.errors import NotProductPage
from forager.parse.base import ProductRecord

__all__ = ["BooksParser"]

_STARS = {"One": 1, "Two": 2, "Three": 3, "Four": 4, "Five": 5}
_AMOUNT = re.compile(r"\d+(?:\.\d+)?")
_CURRENCIES = {"£": "GBP", "$": "USD", "€": "EUR"}


class BooksParser:
    """One book page -> one ProductRecord. Pure and synchronous: no I/O."""

    name = "example-books"  # the entry point's name, too
    version = "1"  # bump it when the output changes: restart-parsing finds older products
    hosts = ("books.toscrape.com",)  # claimed by default for new domains (and subdomains)

    def parse(self, html: str, url: str) -> ProductRecord:
        tree = LexborHTMLParser(html)
        main = tree.css_first(".product_main")
        title = main.css_first("h1") if main is not None else None
        if main is None or title is None:
            raise NotProductPage(f"{url} is not a book page (no .product_main h1)")
        price_text = _text(main.css_first(".price_color"))
        stock = _text(main.css_first(".availability"))
        table = {
            _text(row.css_first("th")): _text(row.css_first("td"))
            for row in tree.css("table.table-striped tr")
        }
        stars = main.css_first(".star-rating")
        rating = None
        if stars is not None:
            classes = (stars.attributes.get("class") or "").split()
            rating = next((Decimal(_STARS[c]) for c in classes if c in _STARS), None)
        crumbs = [_text(a) for a in tree.css("ul.breadcrumb li a")][1:]  # without "Home"
        image = tree.css_first("#product_gallery img")
        src = image.attributes.get("src") if image is not None else None
        description = tree.css_first("#product_description + p")
        reviews = table.get("Number of reviews")
        return ProductRecord(
            url=url,
            product_name=_text(title),
            description=_text(description) or None,
            price=_price(price_text),
            currency=_CURRENCIES.get(price_text[:1]) if price_text else None,
            availability=stock or None,
            is_available=stock.lower().startswith("in stock") if stock else None,
            rating=rating,
            review_count=int(reviews) if reviews and reviews.isdigit() else None,
            category=" > ".join(crumbs) or None,
            sku=table.get("UPC") or None,
            image_urls=[urljoin(url, src)] if src else [],
            parser_name=self.name,
            parser_version=self.version,
        )


def _text(node: object) -> str:
    text = getattr(node, "text", None)
    return " ".join(text().split()) if callable(text) else ""


def _price(text: str) -> Decimal | None:
    match = _AMOUNT.search(text.replace(",", ""))
    try:
        return Decimal(match.group(0)) if match else None
    except InvalidOperation:
        return None
