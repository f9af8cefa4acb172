"""The parsers as the API shows them: every one found, where it came from, and why it is broken."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from forager.parse.plugins import ParserEntry


class ParserPublic(BaseModel):
    """One parser: a built-in, a plugin (its package and version) or one registered by code."""

    name: str = Field(examples=["amazon"])
    version: str | None = Field(
        description="The parser's own version (null when broken).", examples=["2"]
    )
    origin: Literal["builtin", "plugin", "module"] = Field(
        description="builtin, plugin (an entry point of the group forager.parsers) or module "
        "(registered by a module of FORAGER_PARSER_MODULES).",
        examples=["builtin"],
    )
    reference: str = Field(
        description="Where it is loaded from (module:attribute).",
        examples=["forager.parse.amazon:AmazonParser"],
    )
    dist: str | None = Field(
        description="The package that declared the plugin.", examples=["forager-example-parser"]
    )
    dist_version: str | None = Field(description="That package's version.", examples=["0.1.0"])
    hosts: list[str] = Field(
        description="Host patterns it claims by default for new domains.",
        examples=[["amazon.*", "amazon.co.*"]],
    )
    ok: bool = Field(description="False when the parser could not be loaded.", examples=[True])
    error: str | None = Field(
        description="Why a broken parser is not used (name, then the error).", examples=[None]
    )

    @classmethod
    def of(cls, entry: ParserEntry) -> ParserPublic:
        return cls(
            name=entry.name,
            version=entry.version,
            origin=entry.origin,
            reference=entry.reference,
            dist=entry.dist,
            dist_version=entry.dist_version,
            hosts=list(entry.hosts),
            ok=entry.parser is not None,
            error=entry.error,
        )


class ParserList(BaseModel):
    """Every parser found at start-up, usable or broken, by name."""

    items: list[ParserPublic]
