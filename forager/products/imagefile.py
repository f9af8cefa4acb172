"""What a downloaded product image is: its format read from the bytes (not the header), its size,
and a refusal for anything else — never decoding the pixels.

Pillow reads the format and the dimensions from the file's header; ``verify`` then walks the
file's structure (PNG chunk checksums, for instance) without decompressing the image, so a
decompression bomb costs its header's worth of work: its pixel count is refused before any
pixel is made. Served back, the image carries the type found here, so a file that only claims
to be an image is never stored.
"""

from __future__ import annotations

import hashlib
import io
import warnings
from dataclasses import dataclass
from functools import cache

from forager.errors import ForagerError

# Pillow is imported where an image is read (only processes that download images pay for it).

# The formats kept, as (MIME type, file extension). SVG is not among them: it is a document
# that can run scripts, and Pillow cannot read its size.
FORMATS = {
    "PNG": ("image/png", "png"),
    "JPEG": ("image/jpeg", "jpg"),
    "MPO": ("image/jpeg", "jpg"),  # a JPEG with extra frames (cameras); Pillow names it so
    "GIF": ("image/gif", "gif"),
    "WEBP": ("image/webp", "webp"),
    "BMP": ("image/bmp", "bmp"),
    "TIFF": ("image/tiff", "tiff"),
    "ICO": ("image/x-icon", "ico"),
    "AVIF": ("image/avif", "avif"),
}


@cache
def _openable() -> list[str]:
    """The kept formats this Pillow can open (MPO opens through JPEG; AVIF may be missing)."""
    from PIL import Image

    Image.init()
    return [name for name in FORMATS if name in Image.OPEN]


class NotAnImage(ForagerError):
    """The answer is not an image Forager keeps; the message says why."""


@dataclass(frozen=True, slots=True)
class ImageFile:
    content_hash: str  # SHA-256 of the bytes, hex
    content_type: str
    extension: str
    width: int
    height: int
    size: int


def inspect(data: bytes, declared_type: str, max_pixels: int) -> ImageFile:
    """The image in ``data``, served as ``declared_type``; ``NotAnImage`` when the header or the
    bytes are not an image of a kept format, or it has more than ``max_pixels`` pixels."""
    from PIL import Image, UnidentifiedImageError

    declared = declared_type.split(";", 1)[0].strip().lower()
    if not declared.startswith("image/"):
        raise NotAnImage(f"served as {declared or 'no content type'}, not an image")
    try:
        with warnings.catch_warnings():
            # The pixel limit is ours (below); Pillow's own bomb check still refuses past twice
            # its default, which lands in the except below.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=_openable()) as image:
                kind = image.format or ""
                width, height = image.size
                if width * height > max_pixels:
                    raise NotAnImage(
                        f"{width}×{height} pixels, more than FORAGER_IMAGE_MAX_PIXELS "
                        f"({max_pixels})"
                    )
                image.verify()  # the file's structure, without decoding the pixels
    except NotAnImage:
        raise
    except Image.DecompressionBombError as exc:  # past twice Pillow's limit, from the header
        raise NotAnImage(f"decompression bomb refused: {exc}") from exc
    except UnidentifiedImageError as exc:
        raise NotAnImage(
            f"served as {declared} but the bytes are not an image of a kept format"
        ) from exc
    except (OSError, SyntaxError, ValueError, EOFError) as exc:  # Pillow's damaged-file errors
        raise NotAnImage(f"damaged {declared} file: {exc}") from exc
    if kind not in FORMATS:
        raise NotAnImage(f"served as {declared} but the bytes are {kind or 'of no known format'}")
    mime, extension = FORMATS[kind]
    return ImageFile(hashlib.sha256(data).hexdigest(), mime, extension, width, height, len(data))
