"""``forager crawl``: the whole pipeline in-process over a throwaway database."""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy import func, select

from forager.config import Settings
from forager.db import template
from forager.db.engine import Database
from forager.db.models import CrawlTask, Product
from forager.domains import admin as domains_admin
from forager.domains import selectors as domain_selectors
from forager.errors import InvalidRequest
from forager.parse.selectors import compile_map
from forager.products.records import RECORD_FIELDS, image_urls, product_record
from forager.queue.door import SubmitSpec, submit_urls
from forager.queue.lifecycle import TERMINAL, TaskStatus
from forager.runtime import Runtime, open_database
from forager.worker.pool import new_worker_id

PROGRESS_SECONDS = 0.1  # the pool's own count is read this often
CHECK_SECONDS = 5.0  # the database's count, which decides the end, at least this often
TABLE_ROWS = 50  # products shown in the closing table (the -o file has them all)
_PROVENANCE = ("parser_name", "parser_version", "field_confidence", "quality_issues")
_RECORD_COLUMNS = [getattr(Product, name) for name in (*RECORD_FIELDS, *_PROVENANCE)]


async def run_crawl(
    settings: Settings,
    urls: list[str],
    *,
    parser: str | None,
    output: Path | None,
    concurrency: int,
    retries: int,
    selectors: dict[str, Any] | None = None,
    fetcher: str | None = None,
) -> int:
    """Crawl ``urls``; returns the exit code (1 when any URL failed or was invalid). With
    ``selectors``, every domain's pages are read with that selector map; with ``fetcher``,
    fetched with that fetcher."""
    console = Console(stderr=True)
    with tempfile.TemporaryDirectory(prefix="forager-crawl-") as tmp:
        local = settings.model_copy(
            update={
                "data_dir": Path(tmp),
                "database_url": "",
                "page_store_dir": None,
                "max_retries": retries,
                "retry_base_seconds": min(settings.retry_base_seconds, 2.0),
                "retry_max_seconds": min(settings.retry_max_seconds, 10.0),
                "poll_seconds": min(settings.poll_seconds, 0.2),
            }
        )
        runtime = await _open(local)
        try:
            domains = Domains(selectors, fetcher)
            return await _crawl(runtime, console, urls, parser, output, concurrency, domains)
        finally:
            await runtime.aclose()


async def _open(settings: Settings) -> Runtime:
    """The runtime on a new database: a copy of the migrated schema kept from an earlier run,
    else one migrated here (and kept for the next run)."""
    kept = template.template_path()  # one look at the migration files per run
    if not template.copy_template(kept, settings.sqlite_file):
        db = await open_database(settings)
        await db.dispose()
        template.keep_template(kept, settings.sqlite_file)
    return await Runtime.open(settings, migrate=False)


async def _crawl(
    runtime: Runtime,
    console: Console,
    urls: list[str],
    parser: str | None,
    output: Path | None,
    concurrency: int,
    domains: Domains | None = None,
) -> int:
    db, settings = runtime.db, runtime.settings
    runtime.parts.parser.warm()  # the first parse process starts while the URLs are submitted
    outcomes = await submit_urls(
        db, settings, [SubmitSpec(url, parser_name=parser, created_by="cli") for url in urls]
    )
    invalid = [o for o in outcomes if o.result == "invalid"]
    for o in invalid:
        console.print(f"[red]invalid[/red] {o.input_url}: {o.error}")
    task_ids = sorted({o.task_id for o in outcomes if o.task_id is not None})
    if domains is not None:
        await domains.configure(db, task_ids)
    pool = runtime.worker_pool(concurrency, worker_id=new_worker_id("crawl"), kind="crawl")
    # The pool's count reaching the crawl's size wakes the loop below at once, not at its next
    # look at the progress.
    all_ended = asyncio.Event()
    pool.on_ended = lambda ended: all_ended.set() if ended >= len(task_ids) else None
    runner = asyncio.create_task(pool.run())
    loop = asyncio.get_running_loop()
    columns = (TextColumn("crawling"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        bar = progress.add_task("crawl", total=len(task_ids))
        checked = loop.time()
        while task_ids and not runner.done():
            # The pool counts the tasks it ended; the database has the last word (a task taken
            # away and claimed again is counted once there).
            if pool.ended >= len(task_ids) or loop.time() - checked >= CHECK_SECONDS:
                done = await _count_done(db)
                checked = loop.time()
                if done >= len(task_ids):
                    break
                all_ended.clear()  # counted, but not ended in the database: look again later
            progress.update(bar, completed=min(pool.ended, len(task_ids)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_ended.wait(), PROGRESS_SECONDS)
    pool.stop()
    await runner
    return await _report(db, console, task_ids, output, bool(invalid))


def read_selector_map(path: Path) -> dict[str, Any]:
    """The selector map in ``path`` (JSON), checked as the API checks one: ``InvalidRequest``
    says what is wrong (the file, its JSON, or the rule, by its place in the map)."""
    try:
        fields = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidRequest(f"cannot read it: {exc.strerror or exc}", field="selectors") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequest(f"not JSON: {exc}", field="selectors") from None
    compile_map(fields)
    return cast(dict[str, Any], fields)


@dataclass(frozen=True, slots=True)
class Domains:
    """What every domain of the crawl is set to before it starts, as an operator sets a domain
    through the API: a selector map to read its pages with (saved as its version 1 and in
    use), and the fetcher for its pages."""

    selectors: dict[str, Any] | None = None
    fetcher: str | None = None

    async def configure(self, db: Database, task_ids: list[int]) -> None:
        if self.selectors is None and self.fetcher is None:
            return
        async with db.reader() as session:
            domain_ids = set(
                await session.scalars(
                    select(CrawlTask.domain_id).where(CrawlTask.id.in_(task_ids)).distinct()
                )
            )
        for domain_id in sorted(domain_ids):
            if self.selectors is not None:
                note = "forager crawl --selectors"
                await domain_selectors.save(db, domain_id, self.selectors, note, use=True, by="cli")
            if self.fetcher is not None:
                await domains_admin.update(db, domain_id, {"fetcher": self.fetcher})


async def _count_done(db: Database) -> int:
    # The throwaway database holds this crawl's tasks only.
    async with db.reader() as session:
        done = await session.scalar(select(func.count()).where(CrawlTask.status.in_(TERMINAL)))
    return done or 0


async def _report(
    db: Database, console: Console, task_ids: list[int], output: Path | None, any_invalid: bool
) -> int:
    # Rows of the columns the report shows, not ORM objects (thousands of them at the end of a
    # large crawl; the throwaway database holds this crawl's tasks only).
    async with db.reader() as session:
        tasks = list(
            await session.execute(
                select(
                    CrawlTask.url, CrawlTask.status, CrawlTask.error_type, CrawlTask.error_message
                ).where(CrawlTask.id.in_(task_ids))
            )
        )
        products = list(
            await session.execute(
                select(Product.id, *_RECORD_COLUMNS)
                .where(Product.crawl_task_id.in_(task_ids))
                .order_by(Product.id)
            )
        )
        images = await image_urls(session, [p.id for p in products])
    records = [product_record(p, images[p.id]) for p in products]
    if records:
        # The first rows only: rendering thousands of rows cost more than crawling them.
        table = Table("product", "price", "availability", "url")
        for r in records[:TABLE_ROWS]:
            price = f"{r['price']} {r['currency'] or ''}".strip() if r["price"] else "—"
            table.add_row(r["product_name"], price, r["availability"] or "—", r["url"])
        if len(records) > TABLE_ROWS:
            more = len(records) - TABLE_ROWS
            table.add_row(
                f"… and {more} more" + ("" if output else " (-o FILE for all)"), "", "", ""
            )
        Console().print(table)
    failed = [t for t in tasks if t.status != TaskStatus.COMPLETED]
    for t in failed:
        reason = f"{t.error_type}: {t.error_message}" if t.error_type else t.status
        console.print(f"[red]failed[/red] {t.url} — {reason}")
    if output is not None:
        with output.open("w", encoding="utf-8") as out:
            for r in records:
                out.write(json.dumps(r, ensure_ascii=False) + "\n")
        console.print(f"wrote {len(records)} products to {output}")
    console.print(f"{len(records)} products, {len(failed)} failed, of {len(task_ids)} URLs")
    return 1 if failed or any_invalid else 0
