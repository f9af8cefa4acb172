"""The example parser on a saved book page (run with pytest from this folder)."""

from decimal import Decimal
from pathlib import Path

from forager_example_parser import BooksParser

URL = "https://books.toscrape.com/catalogue/a-light-in-the-attic_1000/index.html"


def test_a_book_page_gives_its_product() -> None:
    html = (Path(__file__).parent / "book.html").read_text(encoding="utf-8")
    record = BooksParser().parse(html, URL)
    assert record.product_name == "A Light in the Attic"
    assert (record.price, record.currency) == (Decimal("51.77"), "GBP")
    assert record.is_available is True
    assert record.rating == Decimal(3)
    assert record.category == "Books > Poetry"
    assert record.sku == "a897fe39b1053632"
