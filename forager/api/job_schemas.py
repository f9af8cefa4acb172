"""Request and response bodies of the crawl jobs API (issue 32, ``forager.discovery``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from forager.api.profile_schemas import RequestProfilePublic, TaskProfileIn
from forager.api.wire import HOST_NAME, CrawlURL, Shape
from forager.domains import profile

ScopeName = Literal["host", "domain", "hosts"]
ActionName = Literal["follow", "parse", "ignore"]
JobStatusName = Literal["running", "paused", "cancelled", "done"]
HostName = Annotated[
    str, Shape(HOST_NAME, "a host name (letters, digits, dots and hyphens; IDN as xn--)", 253)
]


class RuleBody(BaseModel):
    """One rule; the first that matches a link (inside its region, if given) says what it is."""

    model_config = ConfigDict(extra="forbid")

    pattern: str = Field(
        min_length=1,
        max_length=1000,
        description="An RE2 regex searched in the normalized URL, or a glob (syntax).",
        examples=["/c/[a-z-]+(\\?page=\\d+)?$"],
    )
    action: ActionName = Field(examples=["follow"])
    syntax: Literal["regex", "glob"] = "regex"
    region: str | None = Field(
        None,
        max_length=500,
        description="A CSS selector: links are taken from inside it only.",
        examples=[None],
    )
    recrawl_seconds: int | None = Field(
        None,
        ge=60,
        le=366 * 86_400,
        description="A parse rule's own recrawl schedule: its pages are crawled again this "
        "often (recurring tasks).",
        examples=[None],
    )


class LinkPolicyBody(BaseModel):
    """What a job takes from its pages: scope, rules, nofollow and the trap limits."""

    model_config = ConfigDict(extra="forbid")

    scope: ScopeName = Field(
        "host",
        description="host: the start URLs' hosts; domain: their registrable domains (public "
        "suffix aware); hosts: the hosts listed.",
    )
    hosts: list[HostName] = Field(default_factory=list, max_length=100, examples=[[]])
    rules: list[RuleBody] = Field(
        default_factory=list,
        max_length=100,
        examples=[
            [
                {"pattern": "/c/[a-z-]+(\\?page=\\d+)?$", "action": "follow"},
                {"pattern": "https://shop.example.com/p/*", "action": "parse", "syntax": "glob"},
            ]
        ],
    )
    follow_nofollow: bool = Field(False, description="Take rel=nofollow links too.")
    max_query_params: int = Field(3, ge=0, le=50)
    max_url_length: int = Field(512, ge=32, le=2048)


class JobCreate(LinkPolicyBody):
    """A crawl job: where it starts, what it may reach, which pages it parses, its budgets."""

    name: str = Field(
        min_length=1, max_length=100, pattern=r"\S", examples=["kettles on shop.example.com"]
    )
    start_urls: list[CrawlURL] = Field(
        default_factory=list,
        max_length=1000,
        description="Pages the crawl starts from (depth 0, followed); give start_urls, "
        "sitemap_urls or both.",
        examples=[["https://shop.example.com/"]],
    )
    sitemap_urls: list[CrawlURL] = Field(
        default_factory=list,
        max_length=100,
        description="Sitemaps or sitemap indexes (gzipped or not) whose URLs go by the rules.",
        examples=[[]],
    )
    robots_sitemaps: bool = Field(
        False, description="Read the start hosts' robots.txt Sitemap: lines as sitemaps too."
    )
    max_depth: int = Field(5, ge=0, le=100)
    max_pages: int = Field(10_000, ge=1, le=10_000_000)
    max_duration_seconds: int = Field(86_400, ge=60, le=90 * 86_400)
    rerun_every_seconds: int | None = Field(
        None,
        ge=60,
        le=366 * 86_400,
        description="Run the job again this long after each run starts, once it is done (a "
        "re-run crawls again only the sitemap pages whose lastmod moved on). None: by hand.",
        examples=[86_400],
    )
    request_profile: TaskProfileIn | None = Field(
        None,
        description="Headers, cookies and a user agent every task of the job is fetched with, "
        "over its domain's request profile (a header by name, a cookie by name), checked and "
        "sealed as a task's own profile: secret values are never shown again.",
    )


class JobPreviewIn(LinkPolicyBody):
    """A rule set tried on one stored page before a job starts."""

    task_id: int = Field(ge=1, description="A task whose page is stored.", examples=[1])
    start_urls: list[CrawlURL] = Field(
        default_factory=list,
        max_length=1000,
        description="The job's start URLs (their hosts are the scope; the page's host is one).",
        examples=[["https://shop.example.com/"]],
    )


class LinkPreview(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    url: str = Field(description="The normalized URL (the href as written when invalid).")
    fate: Literal[
        "follow", "parse", "ignore", "no rule", "out of scope", "trap", "nofollow", "invalid"
    ] = Field(
        description="What the job would do with it: follow, parse or ignore (by rule), or why "
        "it is not taken."
    )
    rule: int | None = Field(description="The index of the rule that matched, if one did.")


class JobPreview(BaseModel):
    """Every distinct link on the page, in page order, and what the rules make of it."""

    task_id: int
    url: str
    links: list[LinkPreview]
    error: str | None = Field(None, description="Why the page could not be read.")


class DepthProgress(BaseModel):
    depth: int
    discovered: int
    fetched: int
    parsed: int
    errors: int


class JobProgress(BaseModel):
    """The job's tasks: all it discovered, those waiting, in flight, fetched, parsed (product
    pages), the products stored from them and the tasks that failed."""

    discovered: int
    queued: int
    in_flight: int
    fetched: int
    parsed: int
    products: int
    errors: int
    links_seen: int = Field(description="Links its rules took, known ones included.")
    links_refused: int = Field(description="Links out of scope, over a budget or a limit.")
    by_depth: list[DepthProgress]


class JobPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    status: JobStatusName
    start_urls: list[str]
    sitemap_urls: list[str]
    scope: ScopeName
    hosts: list[str]
    rules: list[RuleBody]
    follow_nofollow: bool
    robots_sitemaps: bool
    max_depth: int
    max_pages: int
    max_duration_seconds: int
    max_query_params: int
    max_url_length: int
    pages_queued: int
    started_at: datetime
    ends_at: datetime
    finished_at: datetime | None
    created_by: str
    rerun_every_seconds: int | None
    next_run_at: datetime | None = Field(description="When the next scheduled run is due.")
    request_profile: RequestProfilePublic | None = Field(
        None, description="The job's request profile; secret entries without their value."
    )
    progress: JobProgress | None = Field(None, description="Given by GET /api/jobs/{id}.")

    @field_validator("request_profile", mode="before")
    @classmethod
    def _no_secret(cls, value: Any) -> Any:
        # The stored form holds sealed values: only its public view leaves the server.
        return profile.public(value) if isinstance(value, dict) else value
