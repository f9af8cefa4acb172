"""Product images for the test site's ``/gallery/{n}`` pages, made with Pillow: real PNG and
JPEG files, one served twice (same bytes, two URLs), and the ones Forager must refuse."""

from __future__ import annotations

import io
import os
import struct
import zlib
from functools import lru_cache

from PIL import Image

# name -> (width, height) of the real images among GALLERY.
SIZES = {"photo.png": (40, 30), "photo-copy.png": (40, 30), "snap.jpg": (20, 10)}
# What a gallery page lists, main image first; the kind of each for the tests.
GALLERY = (
    "photo.png",  # a real PNG
    "photo-copy.png",  # the same bytes under a second URL: stored once
    "snap.jpg",  # a real JPEG
    "fake.png",  # text served as image/png: the bytes are not an image
    "as-html.jpg",  # a real JPEG served as text/html: the header is not an image type
    "large.png",  # a real PNG over the tests' FORAGER_IMAGE_MAX_BYTES (100 000)
    "bomb.png",  # a PNG header declaring 100 000 × 100 000 pixels
    "missing.png",  # 404
)
LARGE_BYTES = 200_000
ELSEWHERE = "elsewhere.jpg"  # listed last, on another host than the page's


def _encode(image: Image.Image, kind: str) -> bytes:
    out = io.BytesIO()
    image.save(out, kind)
    return out.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


@lru_cache(maxsize=1)
def files() -> dict[str, tuple[bytes, str]]:
    """name -> (body, content type served)."""
    png = Image.new("RGB", SIZES["photo.png"])
    png.putdata([(x * 6, y * 8, 128) for y in range(30) for x in range(40)])
    photo_png = _encode(png, "PNG")
    snap_jpg = _encode(Image.new("RGB", SIZES["snap.jpg"], (200, 30, 30)), "JPEG")
    noise = Image.frombytes("RGB", (300, 300), os.urandom(300 * 300 * 3))  # incompressible
    large = _encode(noise, "PNG")
    assert len(large) > LARGE_BYTES
    header = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    bomb = (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"\0" * 1000))
        + _chunk(b"IEND", b"")
    )
    return {
        "photo.png": (photo_png, "image/png"),
        "photo-copy.png": (photo_png, "image/png"),
        "snap.jpg": (snap_jpg, "image/jpeg"),
        ELSEWHERE: (snap_jpg, "image/jpeg"),
        "fake.png": (b"<html><body>not an image</body></html>", "image/png"),
        "as-html.jpg": (snap_jpg, "text/html"),
        "large.png": (large, "image/png"),
        "bomb.png": (bomb, "image/png"),
    }
