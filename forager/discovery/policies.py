"""The link policy of a crawl job's task, read once per job per process: a job's scope and
rules never change after it starts (its status does; the writer checks that under the job's
lock, not here)."""

from __future__ import annotations

from forager.db.engine import Database
from forager.db.models import CrawlJob
from forager.discovery.rules import LinkPolicy, Rule


class LinkPolicies:
    """Job id → ``LinkPolicy``, cached for the life of a worker's pipeline."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._known: dict[int, LinkPolicy | None] = {}

    async def get(self, job_id: int) -> LinkPolicy | None:
        if job_id not in self._known:
            async with self.db.reader() as session:
                job = await session.get(CrawlJob, job_id)
                self._known[job_id] = None if job is None else policy_of(job)
        return self._known[job_id]


def policy_of(job: CrawlJob) -> LinkPolicy:
    return LinkPolicy(
        job_id=job.id,
        scope=job.scope,
        hosts=tuple(job.hosts),
        rules=tuple(
            Rule(
                r["pattern"],
                r["action"],
                r.get("syntax") or "regex",
                r.get("region"),
                r.get("recrawl_seconds"),
            )
            for r in job.rules
        ),
        follow_nofollow=job.follow_nofollow,
        max_query_params=job.max_query_params,
        max_url_length=job.max_url_length,
        robots_sitemaps=job.robots_sitemaps,
    )
