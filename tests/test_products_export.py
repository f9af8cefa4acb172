"""CSV export cells: scraped text never becomes a spreadsheet formula."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

from forager.products.export import CSV_FIELDS, _csv


def _row(**fields: object) -> dict[str, object]:
    return {name: fields.get(name) for name in CSV_FIELDS}


def test_formula_looking_text_is_defused_and_other_values_are_untouched() -> None:
    rows = [
        _row(
            product_name='=HYPERLINK("http://evil.example","click")',
            brand="+cmd",
            price=Decimal("-1.50"),
        ),
        _row(product_name="@SUM(A1)", category="-2+3", description="\tTab", sku="ABC-1"),
        _row(product_name="Cafeteira = boa", is_available=True, image_urls=["a", "b"]),
    ]
    parsed = [dict(zip(CSV_FIELDS, r, strict=True)) for r in csv.reader(io.StringIO(_csv(rows)))]
    assert parsed[0]["product_name"] == '\'=HYPERLINK("http://evil.example","click")'
    assert parsed[0]["brand"] == "'+cmd"
    assert parsed[0]["price"] == "-1.50"  # numbers are numbers, not text
    assert (parsed[1]["product_name"], parsed[1]["category"]) == ("'@SUM(A1)", "'-2+3")
    assert (parsed[1]["description"], parsed[1]["sku"]) == ("'\tTab", "ABC-1")
    assert parsed[2]["product_name"] == "Cafeteira = boa"
    assert (parsed[2]["is_available"], parsed[2]["image_urls"], parsed[2]["brand"]) == (
        "true",
        "a b",
        "",
    )


def test_joined_list_cells_are_checked_too() -> None:
    rows = [_row(image_urls=['=IMPORTXML("http://evil.example")', "https://a.example/1.jpg"])]
    [parsed] = [dict(zip(CSV_FIELDS, r, strict=True)) for r in csv.reader(io.StringIO(_csv(rows)))]
    assert parsed["image_urls"] == '\'=IMPORTXML("http://evil.example") https://a.example/1.jpg'
