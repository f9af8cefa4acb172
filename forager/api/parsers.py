"""The parsers this Forager found: built-ins and plugins, broken ones with their error."""

from __future__ import annotations

from fastapi import APIRouter

from forager.api.parser_schemas import ParserList, ParserPublic
from forager.parse.registry import entries

router = APIRouter(prefix="/api/parsers", tags=["parsers"])


@router.get("", operation_id="list_parsers")
async def list_parsers() -> ParserList:
    """Every parser with where it came from; a broken plugin is listed with its error."""
    return ParserList(items=[ParserPublic.of(entry) for entry in entries()])
