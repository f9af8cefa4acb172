"""Reading a sitemap (sitemaps.org protocol) safely, in a parse process.

A sitemap is a ``urlset`` (page URLs, each with its ``lastmod``) or a ``sitemapindex`` (more
sitemaps), gzipped or not. The protocol's limits are enforced: 50,000 entries and 50 MB
uncompressed per file (decompression stops there: a gzip bomb costs 50 MB, not memory). The
XML parser resolves no entity and reads nothing from the network, and a sitemap that declares a
DTD at all is refused before anything in it is read: no billion laughs, no XXE (a sitemap never
needs a DTD). Malformed XML is a ``SitemapError`` saying where.
"""

from __future__ import annotations

import gzip
import io
import zlib
from dataclasses import dataclass

from lxml import etree

from forager.errors import ParseError

MAX_ENTRIES = 50_000
MAX_BYTES = 50 * 1024 * 1024
_NS = "{http://www.sitemaps.org/schemas/sitemap/0.9}"


class SitemapError(ParseError):
    """A sitemap that cannot be read: malformed, over the protocol's limits, or unsafe."""

    error_type = "parse"


@dataclass(frozen=True, slots=True)
class Sitemap:
    """``kind`` is ``urlset`` or ``sitemapindex``; ``entries`` are (loc, lastmod or None)."""

    kind: str
    entries: tuple[tuple[str, str | None], ...]


def _inflate(body: bytes, limit: int) -> bytes:
    """The body, gunzipped when it is gzip; ``SitemapError`` past ``limit`` bytes."""
    if body[:2] != b"\x1f\x8b":
        if len(body) > limit:
            raise SitemapError(f"sitemap is over {limit // (1024 * 1024)} MB")
        return body
    out = io.BytesIO()
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(body)) as unzipped:
            while chunk := unzipped.read(1024 * 1024):
                out.write(chunk)
                if out.tell() > limit:
                    raise SitemapError(f"sitemap is over {limit // (1024 * 1024)} MB uncompressed")
    except (OSError, EOFError, zlib.error) as exc:
        raise SitemapError(f"sitemap is not valid gzip: {exc}") from exc
    return out.getvalue()


def read_sitemap(
    body: bytes, *, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES
) -> Sitemap:
    """The sitemap in ``body`` (gzipped or not), or ``SitemapError`` saying what is wrong."""
    xml = _inflate(body, max_bytes)
    parser = etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )
    try:
        root = etree.fromstring(xml, parser)
    except etree.XMLSyntaxError as exc:
        raise SitemapError(f"sitemap is malformed XML: {exc}") from exc
    docinfo = root.getroottree().docinfo
    if getattr(docinfo, "doctype", "") or docinfo.internalDTD is not None:
        raise SitemapError("sitemap declares a DTD (entities are refused: no expansion, no XXE)")
    kind = etree.QName(root).localname
    if kind not in ("urlset", "sitemapindex"):
        raise SitemapError(f"not a sitemap: the root element is <{kind}>")
    child = "url" if kind == "urlset" else "sitemap"
    entries: list[tuple[str, str | None]] = []
    for node in root:
        if not isinstance(node.tag, str) or etree.QName(node).localname != child:
            continue
        if len(entries) >= max_entries:
            raise SitemapError(f"sitemap has over {max_entries:,} entries")
        loc = node.findtext(f"{_NS}loc") or node.findtext("loc")
        lastmod = node.findtext(f"{_NS}lastmod") or node.findtext("lastmod")
        if loc and loc.strip():
            entries.append((loc.strip(), lastmod.strip() if lastmod else None))
    return Sitemap(kind, tuple(entries))
