"""Export downloads: a streamed body as a file attachment, and how OpenAPI describes it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse

from forager.products.export import FORMATS, Format


def download(body: AsyncIterator[bytes], fmt: Format, stem: str) -> StreamingResponse:
    """``body`` streamed as ``stem.csv`` / ``stem.jsonl``."""
    media_type, extension = FORMATS[fmt]
    return StreamingResponse(
        body,
        media_type=media_type,
        headers={"Content-Disposition": f'attachment; filename="{stem}.{extension}"'},
    )


def described(fmt: Format, description: str) -> dict[int | str, dict[str, Any]]:
    """The 200 response of an export route in ``fmt``."""
    media_type = "text/csv" if fmt == "csv" else "application/x-ndjson"
    return {200: {"content": {media_type: {}}, "description": description}}
