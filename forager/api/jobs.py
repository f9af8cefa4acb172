"""Crawl jobs (issue 32): start one, list them, follow one's progress, pause, resume, cancel."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from forager.api.auth import ApiKeyDep
from forager.api.deps import EntityId, PagingDep, RuntimeDep
from forager.api.job_schemas import (
    DepthProgress,
    JobCreate,
    JobPreview,
    JobPreviewIn,
    JobProgress,
    JobPublic,
    LinkPreview,
)
from forager.api.pages import Page
from forager.db.models import CrawlJob
from forager.discovery import admin, jobs
from forager.domains import profile
from forager.worker.parsing import ParseJob

router = APIRouter(prefix="/api/jobs", tags=["jobs"])

_NO_JOB: dict[int | str, dict[str, Any]] = {404: {"description": "No such crawl job."}}
_WRONG_STATUS: dict[int | str, dict[str, Any]] = {
    **_NO_JOB,
    409: {"description": "The job's status does not allow the action."},
}


def public(job: CrawlJob, found: admin.Progress | None = None) -> JobPublic:
    out = JobPublic.model_validate(job)
    if found is not None:
        out.progress = JobProgress(
            discovered=found.discovered,
            queued=found.queued,
            in_flight=found.in_flight,
            fetched=found.fetched,
            parsed=found.parsed,
            products=found.products,
            errors=found.errors,
            links_seen=job.links_seen,
            links_refused=job.links_refused,
            by_depth=[
                DepthProgress(depth=depth, **counts)
                for depth, counts in sorted(found.by_depth.items())
            ],
        )
    return out


@router.post("", operation_id="start_job", status_code=201)
async def start_job(body: JobCreate, runtime: RuntimeDep, key: ApiKeyDep) -> JobPublic:
    """Start a crawl job: its start URLs are queued at once, its links as they are found."""
    spec = jobs.JobSpec(
        name=body.name,
        start_urls=tuple(body.start_urls),
        sitemap_urls=tuple(body.sitemap_urls),
        scope=body.scope,
        hosts=tuple(body.hosts),
        rules=tuple(r.model_dump() for r in body.rules),
        follow_nofollow=body.follow_nofollow,
        robots_sitemaps=body.robots_sitemaps,
        max_depth=body.max_depth,
        max_pages=body.max_pages,
        max_duration_seconds=body.max_duration_seconds,
        max_query_params=body.max_query_params,
        max_url_length=body.max_url_length,
        rerun_every_seconds=body.rerun_every_seconds,
        created_by=key.name,
        request_profile=None
        if body.request_profile is None
        else profile.seal(body.request_profile.model_dump(), runtime.box, None, "request_profile"),
    )
    return public(await jobs.start(runtime.db, runtime.settings, spec))


@router.post(
    "/preview",
    operation_id="preview_job_rules",
    responses={404: {"description": "No such task, or its page is not stored."}},
)
async def preview_job_rules(body: JobPreviewIn, runtime: RuntimeDep) -> JobPreview:
    """Try a rule set on one stored page before a job starts: each link on it and what the job
    would do with it (the parse processes' own link reading)."""
    spec = jobs.JobSpec(
        name="preview",
        start_urls=tuple(body.start_urls),
        scope=body.scope,
        hosts=tuple(body.hosts),
        rules=tuple(r.model_dump() for r in body.rules),
        follow_nofollow=body.follow_nofollow,
        max_query_params=body.max_query_params,
        max_url_length=body.max_url_length,
    )
    policy, stored = await jobs.preview_policy(runtime.db, spec, body.task_id)
    html = await runtime.pages.get(stored.html_path)
    job = ParseJob(stored.url, "", html, fetched=False, links=policy, preview=True)
    parsed = await runtime.parts.parser.parse(job)
    return JobPreview(
        task_id=stored.task_id,
        url=stored.url,
        links=[LinkPreview.model_validate(f) for f in parsed.link_fates],
        error=parsed.error[1] if parsed.error else None,
    )


JobSort = Literal["-created", "created", "-name", "name", "-status", "status"]


@router.get("", operation_id="list_jobs")
async def list_jobs(
    runtime: RuntimeDep,
    paging: PagingDep,
    sort: Annotated[
        JobSort,
        Query(description="By creation (the id), name or status; a leading - is descending."),
    ] = "-created",
) -> Page[JobPublic]:
    """Crawl jobs, newest first or in the ``sort`` order (their progress: GET
    /api/jobs/{id})."""
    rows, total = await admin.list_page(
        runtime.db, limit=paging.limit, offset=paging.offset, sort=sort
    )
    return Page(
        items=[public(j) for j in rows], total=total, limit=paging.limit, offset=paging.offset
    )


@router.get("/{job_id:int}", operation_id="get_job", responses=_NO_JOB)
async def get_job(job_id: EntityId, runtime: RuntimeDep) -> JobPublic:
    """The job and its progress: discovered, queued, fetched, parsed, products, errors, by
    depth."""
    return public(*await admin.show(runtime.db, job_id))


@router.post("/{job_id:int}/pause", operation_id="pause_job", responses=_WRONG_STATUS)
async def pause_job(job_id: EntityId, runtime: RuntimeDep) -> JobPublic:
    """Hold the job's waiting tasks; links found meanwhile wait paused."""
    return public(await admin.act(runtime.db, job_id, "pause"))


@router.post("/{job_id:int}/resume", operation_id="resume_job", responses=_WRONG_STATUS)
async def resume_job(job_id: EntityId, runtime: RuntimeDep) -> JobPublic:
    """Give the job's paused tasks back to the queue."""
    return public(await admin.act(runtime.db, job_id, "resume"))


@router.post("/{job_id:int}/rerun", operation_id="rerun_job", responses=_WRONG_STATUS)
async def rerun_job(job_id: EntityId, runtime: RuntimeDep) -> JobPublic:
    """Run a done or cancelled job again: its start URLs and sitemaps are fetched again, and of
    the pages it knows only those whose sitemap lastmod changed."""
    return public(await admin.rerun(runtime.db, runtime.settings, job_id))


@router.post("/{job_id:int}/cancel", operation_id="cancel_job", responses=_WRONG_STATUS)
async def cancel_job(job_id: EntityId, runtime: RuntimeDep) -> JobPublic:
    """Cancel the job and its waiting tasks; links found afterwards are refused."""
    return public(await admin.act(runtime.db, job_id, "cancel"))
