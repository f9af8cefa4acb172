"""What a crawl job takes from a page (issue 32), without a database: scope (public-suffix
aware), ordered rules with globs and CSS regions, rel=next / canonical, nofollow, base href and
the trap limits."""

from __future__ import annotations

from forager.discovery.links import extract_links, link_fates
from forager.discovery.rules import LinkPolicy, Rule, glob_to_regex
from forager.discovery.scope import in_scope, registrable, scope_hosts

PAGE = "https://www.shop.example.co.uk/c/kettles"


def policy(
    *rules: Rule,
    scope: str = "host",
    follow_nofollow: bool = False,
    max_query_params: int = 2,
    max_url_length: int = 200,
) -> LinkPolicy:
    hosts = tuple(scope_hosts(scope, ["www.shop.example.co.uk"], []))
    return LinkPolicy(1, scope, hosts, rules, follow_nofollow, max_query_params, max_url_length)


def taken(html: str, p: LinkPolicy) -> list[tuple[str, str]]:
    links, _ = extract_links(html, PAGE, p)
    return [(link.where.url, link.action) for link in links]


def test_the_registrable_domain_knows_public_suffixes() -> None:
    assert registrable("www.shop.example.co.uk") == "example.co.uk"
    assert registrable("127.0.0.1") == "127.0.0.1"
    hosts = tuple(scope_hosts("domain", ["www.shop.example.co.uk"], []))
    assert hosts == ("example.co.uk",)
    assert in_scope("domain", hosts, "img.example.co.uk")
    assert not in_scope("domain", hosts, "example.com")
    assert not in_scope("domain", hosts, "other.co.uk")


def test_the_first_matching_rule_wins_and_unmatched_links_are_ignored() -> None:
    html = """<a href="/p/1">one</a><a href="/p/sale">sale</a><a href="/about">about</a>
    <a href="https://img.example.co.uk/p/2">elsewhere in the domain</a>"""
    rules = (
        Rule("/p/sale$", "ignore"),
        Rule("https://*.example.co.uk/p/*", "parse", "glob"),
    )
    assert taken(html, policy(*rules)) == [("https://www.shop.example.co.uk/p/1", "parse")]
    assert taken(html, policy(*rules, scope="domain")) == [
        ("https://www.shop.example.co.uk/p/1", "parse"),
        ("https://img.example.co.uk/p/2", "parse"),
    ]


def test_globs_keep_a_star_within_a_path_segment() -> None:
    assert glob_to_regex("https://x.test/p/*") == "^https://x\\.test/p/[^/]*$"
    rules = (Rule("https://**/p/*", "parse", "glob"),)
    html = '<a href="/p/1">one</a><a href="/p/1/reviews">reviews</a>'
    assert taken(html, policy(*rules)) == [("https://www.shop.example.co.uk/p/1", "parse")]


def test_a_region_limits_where_a_rule_takes_links() -> None:
    html = """<main class="grid"><a href="/p/1">in the grid</a></main>
    <aside><a href="/p/2">also viewed</a></aside>"""
    rules = (Rule("/p/", "parse", region="main.grid"),)
    assert taken(html, policy(*rules)) == [("https://www.shop.example.co.uk/p/1", "parse")]


def test_next_canonical_base_href_and_nofollow() -> None:
    html = """<head><base href="https://www.shop.example.co.uk/c/">
    <link rel="next" href="kettles?page=2"><link rel="canonical" href="kettles">
    <link rel="stylesheet" href="site.css"></head>
    <a rel="nofollow sponsored" href="/p/9">ad</a><a href="/p/1#reviews">one</a>"""
    rules = (Rule("/c/", "follow"), Rule("/p/", "parse"))
    assert taken(html, policy(*rules)) == [
        ("https://www.shop.example.co.uk/c/kettles?page=2", "follow"),
        ("https://www.shop.example.co.uk/c/kettles", "follow"),
        ("https://www.shop.example.co.uk/p/1", "parse"),
    ]
    assert ("https://www.shop.example.co.uk/p/9", "parse") in taken(
        html, policy(*rules, follow_nofollow=True)
    )
    robots_meta = '<meta name="robots" content="noindex, nofollow"><a href="/p/1">one</a>'
    assert taken(robots_meta, policy(*rules)) == []


def test_traps_are_cut_by_query_parameters_and_url_length() -> None:
    html = """<a href="/c/k?page=2">2</a><a href="/c/k?page=2&sid=1&sort=a">session</a>
    <a href="/c/k/{}">long</a><a href="http://[broken/c/">not a URL</a>""".format("x" * 300)
    links, refused = extract_links(html, PAGE, policy(Rule("/c/", "follow")))
    assert [link.where.url for link in links] == ["https://www.shop.example.co.uk/c/k?page=2"]
    assert refused == 3


def test_every_link_has_a_fate_in_page_order() -> None:
    html = """<a rel="nofollow" href="/p/9">ad</a><a href="/c/k">kettles</a>
    <a href="https://elsewhere.test/p/1">elsewhere</a><a href="/p/1?a=1&b=2&c=3">trap</a>
    <a href="/about">about</a><a href="/p/2">two</a><a href="/p/sale">sale</a>
    <a href="http://[broken/">broken</a><a href="/c/k#top">kettles again</a>"""
    rules = (Rule("/p/sale$", "ignore"), Rule("/c/", "follow"), Rule("/p/", "parse"))
    fates = [
        (f.url.removeprefix("https://www.shop.example.co.uk"), f.fate, f.rule)
        for f in link_fates(html, PAGE, policy(*rules))
    ]
    assert fates == [
        ("/p/9", "nofollow", None),
        ("/c/k", "follow", 1),
        ("https://elsewhere.test/p/1", "out of scope", None),
        ("/p/1?a=1&b=2&c=3", "trap", None),
        ("/about", "no rule", None),
        ("/p/2", "parse", 2),
        ("/p/sale", "ignore", 0),
        ("http://[broken/", "invalid", None),
    ]
