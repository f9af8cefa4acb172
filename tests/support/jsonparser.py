"""A parser plugin reading a shop's JSON API answer (issue 33), registered on import: light, so
the parse processes that import it (``parser_modules``) start quickly."""

from __future__ import annotations

import json
from decimal import Decimal

from forager.errors import NotProductPage
from forager.parse import registry
from forager.parse.base import Extracted, ProductRecord
from forager.parse.jsonpath import value_at


class JsonApiParser:
    """Reads ``data.product`` of the body, which it gets as text like any parser."""

    name = "test-json-api"
    version = "1"

    def parse(self, html: str, url: str) -> Extracted:
        doc = json.loads(html, parse_float=Decimal)  # the digits JSON wrote, exactly
        product = value_at(doc, "data.product")
        if not isinstance(product, dict):
            raise NotProductPage(f"{url}: no data.product")
        record = ProductRecord(
            url=url,
            product_name=product["title"],
            price=value_at(product, "price.amount"),
            currency=value_at(product, "price.currency"),
            sku=product["sku"],
            is_available=bool(product["stock"]),
        )
        return Extracted(record)


registry.register(JsonApiParser())
