"""Robot-check and access-denied detection shared by the parsers."""

from __future__ import annotations

import pytest

from forager.errors import BlockedPage, CaptchaPage, NotProductPage
from forager.parse.amazon import AmazonParser
from forager.parse.classify import classify
from forager.parse.generic import GenericParser

AMAZON_ROBOT_CHECK = """<!doctype html><html><head><title dir="ltr">Amazon.com</title></head>
<body><!-- To discuss automated access to Amazon data please contact
api-services-support@amazon.com. --><div class="a-box"><h4>Enter the characters you see below</h4>
<form method="get" action="/errors/validateCaptcha"><img src="https://x/captcha/abc.jpg">
<h4>Type the characters you see in this image:</h4><input id="captchacharacters"></form>
</div></body></html>"""
AMAZON_ROBOT_CHECK_PT = """<html><body><form action="/errors/validateCaptcha">
<h4>Digite os caracteres que você vê abaixo</h4></form></body></html>"""
CLOUDFLARE = """<html><head><title>Just a moment...</title></head><body>
<div id="cf-challenge-running">Checking your browser before accessing shop.example.</div>
</body></html>"""
RECAPTCHA = """<html><head><title>Security check</title></head><body>
<p>Please verify you are a human.</p><div class="g-recaptcha" data-sitekey="k"></div>
</body></html>"""
AKAMAI = """<HTML><HEAD><TITLE>Access Denied</TITLE></HEAD><BODY><H1>Access Denied</H1>
You don't have permission to access "http://www.shop.example/p/1" on this server.<P>
Reference #18.1234.5678 <P>https://errors.edgesuite.net/18.1234</BODY></HTML>"""
CLOUDFLARE_BLOCK = """<html><head><title>Attention Required! | Cloudflare</title></head>
<body><h1>Sorry, you have been blocked</h1><div id="cf-error-details">x</div></body></html>"""


@pytest.mark.parametrize("html", [AMAZON_ROBOT_CHECK, AMAZON_ROBOT_CHECK_PT, CLOUDFLARE, RECAPTCHA])
@pytest.mark.parametrize("parser", [AmazonParser(), GenericParser()])
def test_robot_checks_raise_captcha(html: str, parser: AmazonParser | GenericParser) -> None:
    with pytest.raises(CaptchaPage, match="instead of the product page"):
        parser.parse(html, "https://www.amazon.com/dp/B0TEST0001")


@pytest.mark.parametrize("html", [AKAMAI, CLOUDFLARE_BLOCK])
def test_access_denied_raises_blocked(html: str) -> None:
    with pytest.raises(BlockedPage, match="refused"):
        GenericParser().parse(html, "https://shop.example/p/1")


def test_product_page_mentioning_captcha_is_not_a_robot_check() -> None:
    html = """<html><head><script type="application/ld+json">
    {"@type": "Product", "name": "Widget", "offers": {"price": "5.00", "priceCurrency": "USD"}}
    </script><script>var captchaUrl = "/errors/validateCaptcha"; // g-recaptcha</script></head>
    <body><h1>Widget</h1></body></html>"""
    assert classify(html) is None
    assert classify(html, markup_first=False) is None  # the same answer in either order
    assert GenericParser().parse(html, "https://shop.example/p/1").product_name == "Widget"
    amazon = '<body><span id="productTitle">Widget</span>' + " " * 400_000 + "</body>"
    assert classify("validateCaptcha " + amazon, markup_first=False) is None


@pytest.mark.parametrize("html", [AMAZON_ROBOT_CHECK, CLOUDFLARE, RECAPTCHA, AKAMAI])
def test_block_pages_are_found_in_either_order(html: str) -> None:
    assert classify(html) == classify(html, markup_first=False) is not None


def test_page_without_product_data_is_not_a_product_page() -> None:
    html = "<html><head><title>Welcome</title></head><body><h1>Our shop</h1></body></html>"
    with pytest.raises(NotProductPage, match="no product data"):
        GenericParser().parse(html, "https://shop.example/")
