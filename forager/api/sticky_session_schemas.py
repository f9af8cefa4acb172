"""Sticky session bodies (issue 33): a domain's session policy, and its sessions as shown (state,
uses, age, proxy; never a cookie)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from forager.api.wire import CrawlURL, JsonBody
from forager.domains.sticky_sessions import DEFAULT_MAX_AGE_MINUTES, DEFAULT_MAX_USES


class StickySessionsIn(JsonBody):
    """A domain's sticky sessions: each fetch takes one (cookies kept, bound to one proxy),
    retired after ``max_uses`` fetches, ``max_age_minutes``, or a block."""

    enabled: bool = Field(True, description="false turns sessions off (the stored ones stay).")
    max_uses: int = Field(DEFAULT_MAX_USES, ge=1, le=100_000, description="Fetches per session.")
    max_age_minutes: float = Field(
        DEFAULT_MAX_AGE_MINUTES, gt=0, le=10_080, description="A session's lifetime."
    )
    warmup_url: CrawlURL | None = Field(
        None,
        description="Fetched first by each new session (its cookies kept); null: none.",
        examples=["https://www.example.com/"],
    )


class StickySessionsPublic(BaseModel):
    max_uses: int
    max_age_minutes: float
    warmup_url: str | None = None


class DomainSessionPublic(BaseModel):
    """One session; its cookies are secret (stored encrypted) and never shown."""

    id: int
    domain_id: int
    state: Literal["active", "retired"]
    uses: int = Field(description="Fetches made through it.")
    error_score: float = Field(description="+1 a failed fetch, -0.5 an answer; retired at 3.")
    age_seconds: float
    proxy_id: int | None = Field(description="The proxy it is bound to (null: direct).")
    leased: bool = Field(description="A fetch holds it now.")
    has_cookies: bool
    created_at: datetime
    last_used_at: datetime | None
    retired_at: datetime | None
    retired_reason: str | None = Field(
        description="max_uses, max_age, errors, a block's error type (blocked, captcha, "
        "rate_limited, proxy), proxy_unusable, or operator."
    )


class SessionsRetired(BaseModel):
    retired: int = Field(description="How many active sessions were retired.")
