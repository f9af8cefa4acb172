"""Request profile bodies (issue 33): the headers, cookies and user agent of a domain's fetches or
of one task's; checked by ``forager.domains.profile``, secret values never shown."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from forager.api.wire import JsonBody
from forager.domains import profile

_HIDDEN = (
    'Stored encrypted and never shown again (the API answers "secret": true and no value). '
    "Authorization, X-Api-Key and X-Auth-Token headers are always secret. Leave the value out "
    "to keep the secret stored under this name."
)


class HeaderIn(JsonBody):
    name: str = Field(
        min_length=1,
        max_length=profile.MAX_NAME,
        description="A header name (a token). Refused: Host, Connection, Content-Length, "
        "Transfer-Encoding, TE, Trailer, Upgrade, Keep-Alive, Expect, Proxy-*, and Cookie / "
        "User-Agent (the profile's own fields).",
        examples=["Accept-Language"],
    )
    value: str | None = Field(
        None, max_length=profile.MAX_VALUE, description="No CR, LF or NUL.", examples=["de-DE"]
    )
    secret: bool = Field(False, description=_HIDDEN)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return profile.check_header_name(value)

    @field_validator("value")
    @classmethod
    def _value(cls, value: str | None) -> str | None:
        return None if value is None else profile.check_header_value(value)


class CookieIn(JsonBody):
    name: str = Field(min_length=1, max_length=profile.MAX_NAME, examples=["locale"])
    value: str | None = Field(
        None,
        max_length=profile.MAX_VALUE,
        description="Cookie octets: no spaces, commas, semicolons or quotes.",
        examples=["de-DE"],
    )
    secret: bool = Field(False, description=_HIDDEN)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return profile.check_name(value)

    @field_validator("value")
    @classmethod
    def _value(cls, value: str | None) -> str | None:
        return None if value is None else profile.check_cookie_value(value)


class RequestProfileIn(JsonBody):
    """Headers and cookies sent with every fetch (replacing the whole profile when given)."""

    headers: list[HeaderIn] = Field(default_factory=list, max_length=profile.MAX_ENTRIES)
    cookies: list[CookieIn] = Field(default_factory=list, max_length=profile.MAX_ENTRIES)

    @model_validator(mode="after")
    def _unique(self) -> RequestProfileIn:
        profile.unique(self.headers, "headers")
        profile.unique(self.cookies, "cookies")
        return self


class TaskProfileIn(RequestProfileIn):
    """A task's own profile: over its domain's, header by header and cookie by cookie."""

    user_agent: str | None = Field(
        None, min_length=1, max_length=255, description="Instead of the domain's user agent."
    )

    @field_validator("user_agent")
    @classmethod
    def _user_agent(cls, value: str | None) -> str | None:
        return None if value is None else profile.check_user_agent(value)


class EntryPublic(BaseModel):
    name: str
    value: str | None = Field(description="Null for a secret.")
    secret: bool


class RequestProfilePublic(BaseModel):
    user_agent: str | None = None
    headers: list[EntryPublic] = Field(default_factory=list)
    cookies: list[EntryPublic] = Field(default_factory=list)


def shown(stored: dict[str, Any] | None) -> RequestProfilePublic | None:
    """The public view of a stored profile (no secret value)."""
    view = profile.public(stored)
    return None if view is None else RequestProfilePublic.model_validate(view)


class TaskRequestIn(TaskProfileIn):
    """A task's own request: a POST with a body, and headers, cookies and a user agent over the
    domain's profile. Part of the task's identity: a POST and a GET of one URL, or two POSTs
    with different bodies, are different tasks."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "method": "POST",
                    "json_body": {"sku": "A-1", "zip": "10115"},
                    "headers": [{"name": "Accept-Language", "value": "de-DE"}],
                    "cookies": [{"name": "locale", "value": "de-DE"}],
                }
            ]
        }
    )

    method: Literal["GET", "POST"] | None = Field(
        None, description="Default: POST with a body, else GET.", examples=["POST"]
    )
    json_body: Any = Field(
        None,
        description="A JSON body (sent as application/json; POST only); at most "
        f"{profile.MAX_BODY // 1024} KiB encoded.",
        examples=[{"sku": "A-1", "zip": "10115"}],
    )
    form: dict[str, str] | None = Field(
        None,
        description="A form body (application/x-www-form-urlencoded; POST only).",
        max_length=100,
    )

    @model_validator(mode="after")
    def _one_body(self) -> TaskRequestIn:
        if self.json_body is not None and self.form is not None:
            raise ValueError("give json_body or form, not both")
        return self


class TaskRequestPublic(BaseModel):
    """A task's own request as shown: secret values left out."""

    method: str
    body_type: str | None = None
    body: str | None = None
    profile: RequestProfilePublic | None = None


def shown_request(stored: dict[str, Any] | None) -> TaskRequestPublic | None:
    if not stored:
        return None
    return TaskRequestPublic(
        method=stored.get("method", "GET"),
        body_type=stored.get("body_type"),
        body=stored.get("body"),
        profile=shown(stored.get("profile")),
    )
