"""Product pages in every script, without structured data: the visible page alone says that it
shows one product (issue 37), and pages that show none are still refused."""

from __future__ import annotations

import pytest
from selectolax.lexbor import LexborHTMLParser

from forager.errors import NotProductPage
from forager.parse import visible
from forager.parse.generic import GenericParser
from tests.parse.script_pages import NOT_PRODUCT_PAGES, PRODUCT_PAGES, Page


@pytest.mark.parametrize("key", sorted(PRODUCT_PAGES))
def test_a_shop_page_in_any_script_is_a_product_page(key: str) -> None:
    page: Page = PRODUCT_PAGES[key]
    record = GenericParser().parse(page.html, page.url)
    assert record.product_name == page.name
    assert (record.price, record.currency) == (page.price, page.currency)
    assert record.is_available is page.in_stock
    if page.sku is not None:
        assert record.sku == page.sku


@pytest.mark.parametrize("key", sorted(NOT_PRODUCT_PAGES))
def test_a_listing_or_article_in_any_script_is_refused(key: str) -> None:
    url, html = NOT_PRODUCT_PAGES[key]
    with pytest.raises(NotProductPage):
        GenericParser().parse(html, url)


def _evidence(body: str, url: str = "https://shop.example.ge/p/1") -> visible.Evidence:
    html = f"<html><head><title>ჩაიდანი</title></head><body><h1>ჩაიდანი</h1>{body}</body></html>"
    return visible.read(LexborHTMLParser(html), url, ["ჩაიდანი"])


@pytest.mark.parametrize(
    "form",
    [
        # A label in a language no word list holds (Georgian): the form posts to the cart.
        '<form method="post" action="/cart/add"><input type="hidden" name="id" value="7">'
        "<button>კალათაში დამატება</button></form>",
        # WooCommerce-like: no action, but a quantity field next to the submit button.
        '<form class="cart" method="post"><input type="number" name="quantity" value="1">'
        '<button type="submit" name="x" value="501">კალათაში</button></form>',
        '<form method="post" action="/order/cart_ps.php"><input name="goodsCnt[]" value="1">'
        '<input type="submit" value="დამატება"></form>',
    ],
)
def test_a_cart_form_is_a_buy_button_whatever_its_language(form: str) -> None:
    seen = _evidence(f'<div class="price">49,00 ₾</div>{form}')
    assert seen.buy_button
    assert seen.price is not None
    assert seen.price.currency == "GEL"


@pytest.mark.parametrize(
    "form",
    [
        '<form action="/search"><input type="search" name="q"><button>ძიება</button></form>',
        '<form method="post" action="/newsletter"><input type="email" name="e">'
        "<button>გამოწერა</button></form>",
        '<form method="post" action="/cart/add"><input type="number" name="quantity">'
        "<button disabled>კალათაში</button></form>",
        '<form method="post" action="/cart/add"><button type="button">კალათაში</button></form>',
        '<div class="related"><form method="post" action="/cart/add">'
        "<button>კალათაში</button></form></div>",
    ],
)
def test_search_newsletter_disabled_and_related_forms_are_not_buy_buttons(form: str) -> None:
    assert not _evidence(f'<div class="price">49,00 ₾</div>{form}').buy_button


def test_a_quantity_field_is_evidence_of_one_product() -> None:
    assert _evidence('<label>რაოდენობა <input name="qty" value="1"></label>').quantity
    assert _evidence('<form><input type="number" value="1"></form>').quantity
    assert not _evidence('<input type="number" name="year">').quantity
    assert not _evidence('<div class="related"><input name="qty"></div>').quantity


@pytest.mark.parametrize(
    ("title", "url"),
    [
        ("페이지를 찾을 수 없습니다", "https://shop.example.kr/goods/1"),
        ("ページが見つかりません", "https://shop.example.jp/products/1"),
        ("Страница не найдена", "https://shop.example.ru/catalog/x/"),
        ("הדף לא נמצא", "https://www.example.co.il/product/x"),
    ],
)
def test_an_error_page_in_any_script_is_refused(title: str, url: str) -> None:
    html = (
        f"<html><head><title>{title}</title></head><body><h1>{title}</h1>"
        '<div class="price">1 290 ₽</div><button class="add-to-cart">+</button></body></html>'
    )
    with pytest.raises(NotProductPage, match="an error page"):
        GenericParser().parse(html, url)
