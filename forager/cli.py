"""The ``forager`` command line. Errors print as one line; ``--debug`` shows the traceback."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import ipaddress
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO, TypeVar

import typer

from forager import __version__
from forager.errors import ConfigError, ForagerError

if TYPE_CHECKING:  # the settings bring pydantic, 0.1 s to import: only commands that read them
    from forager.config import Settings
    from forager.db.engine import Database
    from forager.parse.plugins import ParserEntry
    from forager.queue.door import BatchAction, BatchMoved, BatchProgress
    from forager.runtime import Runtime

app = typer.Typer(
    help="Forager: a self-hosted scraping control plane.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Click's plain help: flags show no value (rich's table printed `--recurring <bool>`, which
    # reads as if `--recurring true` were the way to set it) and types read as INTEGER, TEXT.
    rich_markup_mode=None,
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
app.add_typer(db_app, name="db")
apikey_app = typer.Typer(help="API keys for the /api endpoints.", no_args_is_help=True)
app.add_typer(apikey_app, name="apikey")
agent_app = typer.Typer(help="Home-network agents: register them, run one.", no_args_is_help=True)
app.add_typer(agent_app, name="agent")
parsers_app = typer.Typer(help="Parsers: built-in ones and plugins.", no_args_is_help=True)
app.add_typer(parsers_app, name="parsers")
pages_app = typer.Typer(help="The page store: raw pages kept per fetch.", no_args_is_help=True)
app.add_typer(pages_app, name="pages")
job_app = typer.Typer(
    help="Crawl jobs: discover a site's pages from its front door.", no_args_is_help=True
)
app.add_typer(job_app, name="job")
feed_app = typer.Typer(
    help="Feeds: scheduled exports of what changed since the last run.", no_args_is_help=True
)
app.add_typer(feed_app, name="feed")
batch_app = typer.Typer(
    help="Batches: the tasks submitted under one batch name, as a whole.", no_args_is_help=True
)
app.add_typer(batch_app, name="batch")

_state = {"debug": False}


def _fail(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(1)


def _settings(quiet: bool = False) -> Settings:
    from forager.config import get_settings
    from forager.runtime import configure_logging

    settings = get_settings()
    configure_logging(settings, quiet=quiet and not _state["debug"])
    return settings


T = TypeVar("T")


def _started() -> None:
    """Start-up is over: what it made (modules, classes, settings) lives as long as the process,
    so the cyclic collector moves it aside instead of walking it again at every full collection
    (on a 3,000-page `forager crawl`: 0.3 s of collections → 0.1 s)."""
    gc.freeze()


@contextlib.contextmanager
def _start_up(*, parses: bool = False) -> Iterator[None]:
    """Imports and settings with the cyclic collector off, then ``_started``. Start-up leaves
    next to no garbage (a few dozen objects), yet the collections its allocations set off walked
    the growing heap again and again: 0.1 s of the 0.8 s of CPU of a 10-page `forager crawl`.

    A command that ``parses`` pages starts the parse processes' fork server first, so the
    parsers load on the other core while the rest imports here."""
    if parses:
        from forager.worker.warmup import start_fork_server

        start_fork_server()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
    _started()


def _with_db(
    settings: Settings, work: Callable[[Database], Awaitable[T]], *, create: bool = False
) -> T:
    """Run ``work`` against the migrated database of a ``Runtime``, then close it (events
    name ``cli``)."""
    return _with_runtime(settings, lambda runtime: work(runtime.db), create=create)


def _with_runtime(
    settings: Settings, work: Callable[[Runtime], Awaitable[T]], *, create: bool = False
) -> T:
    """Run ``work`` with an open ``Runtime`` (database and page store), then close it. Only
    ``serve``, the workers and ``db upgrade`` ``create`` a database: any other command run
    where there is none says where it looked instead of writing to a new, empty one."""
    from forager.db import audit
    from forager.runtime import Runtime

    async def _run() -> T:
        audit.ACTOR.set("cli")  # an operator command: its events name the command line
        runtime = await Runtime.open(settings, create=create)
        try:
            return await work(runtime)
        finally:
            await runtime.aclose()

    return asyncio.run(_run())


def _version(value: bool) -> None:
    if value:
        typer.echo(f"forager {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks.")] = False,
    _: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    _state["debug"] = debug


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to bind (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port to bind (default 8000).")] = None,
) -> None:
    """Run the API, the dashboard, the scheduler and the built-in worker pool."""
    import uvicorn

    from forager.app import create_app

    settings = _settings()
    host = host or settings.host
    port = port or settings.port
    # Bound before anything starts: a port in use is one line, not a traceback after the banner.
    listening = _bind(host, port)
    try:
        has_key = asyncio.run(_any_active_key(settings))
        if not _is_loopback(host) and not has_key:
            raise ConfigError(
                f"refusing to bind {host}: no API key exists, so anyone who can reach it could "
                "control Forager; create one with `make apikey` "
                "(`forager apikey create --name NAME --role admin`)"
            )
        url = f"http://{host}:{port}"
        typer.echo(f"Forager {__version__} on {url} (database: {_db_label(settings)})")
        typer.echo(f"Dashboard: {url}/")
        if not has_key:
            typer.echo(
                "No API key yet: create the first one in this folder with `make apikey` "
                "(or `.venv/bin/forager apikey create --name admin --role admin`), then log in "
                "with the key it prints."
            )
        from forager.agents.protocol import MAX_MESSAGE_BYTES

        # ws_max_size: no agent message is buffered beyond this (bodies come in chunks). No
        # WebSocket pings from here: agents' heartbeats (FORAGER_AGENT_TIMEOUT_SECONDS) say
        # who is alive, and a busy server should not drop agents for a late pong.
        served = create_app(settings)
        _started()
        config = uvicorn.Config(
            served,
            host=host,
            port=port,
            log_level="warning",
            ws_max_size=MAX_MESSAGE_BYTES,
            ws_ping_interval=None,
        )
        server = uvicorn.Server(config)
        server.run(sockets=[listening])
    finally:
        listening.close()
    if not server.started:  # start-up failed (uvicorn logged why): as `uvicorn.run` exits
        raise typer.Exit(3)


async def _any_active_key(settings: Settings) -> bool:
    """Whether the database (created and migrated here when new) has a key to log in with."""
    from forager.apikeys import any_active_key
    from forager.runtime import open_database

    db = await open_database(settings)
    try:
        return await any_active_key(db)
    finally:
        await db.dispose()


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket of ``serve``; a port in use (or an address not here) says what to
    do instead."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        bound = socket.create_server((host, port), family=family, backlog=2048)
        # The same socket with its protocol read back (IPPROTO_TCP, where create_server leaves
        # 0): asyncio turns Nagle off (TCP_NODELAY) only on connections accepted from a socket
        # whose protocol says TCP. With Nagle on, a response written in two pieces (uvicorn
        # writes head and body apart) waited for the client's delayed ACK: +40 ms or more on
        # every request of a kept-alive connection (the dashboard's, agents' WebSockets).
        return socket.socket(fileno=bound.detach())
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} on {host} is already in use (another `forager serve`?): "
                f"pick another with `make serve PORT={port + 1}` or "
                f"`FORAGER_PORT={port + 1} make serve`"
            ) from None
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _db_label(settings: Settings) -> str:
    from forager.db.engine import database_label

    return database_label(settings.resolved_database_url)


@app.command()
def worker(
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Tasks in flight at once (default 8). While no other worker or agent "
            "claims, requests in flight: as many fetched pages again may wait to be parsed "
            "and written meanwhile.",
        ),
    ] = None,
) -> None:
    """Run a worker process: claim tasks from the database and crawl them until SIGTERM."""
    with _start_up(parses=True):
        from forager.runtime import Runtime

        settings = _settings()

    async def _run() -> None:
        # A SIGTERM while the runtime is still opening is a graceful stop too: the pool
        # then never claims anything.
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        runtime = await Runtime.open(settings)
        watching: asyncio.Task[None] | None = None
        try:
            if stopping.is_set():
                return
            pool = runtime.worker_pool(concurrency or settings.worker_concurrency)
            # Live monitors run beside the pool, leased per monitor (issue 15).
            monitors = runtime.monitor_runner(pool.worker_id) if settings.monitor_slots else None

            def stop() -> None:
                pool.stop()
                if monitors is not None:
                    monitors.stop()

            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop)
            if monitors is not None:
                watching = asyncio.create_task(monitors.run(), name="monitor runner")
            await pool.run()
        finally:
            if watching is not None and runtime.monitors is not None:
                runtime.monitors.stop()
                await watching
            await runtime.aclose()
        if pool.recycle_reason is not None:
            recycle.append(pool.recycle_reason)

    recycle: list[str] = []
    asyncio.run(_run())
    if recycle:
        # Past FORAGER_WORKER_MEMORY_LIMIT_MB or _MAX_LIFETIME_HOURS: everything was finished
        # and given back above; start afresh in this same process slot.
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", "forager.cli", *sys.argv[1:]])  # noqa: S606


@app.command("celery-worker")
def celery_worker(
    concurrency: Annotated[
        int | None, typer.Option(min=1, help="Tasks in flight at once (default 8).")
    ] = None,
    queue: Annotated[
        list[str] | None,
        typer.Option(
            "--queue",
            "-Q",
            help="Consume only this queue (priority_queue, crawl_queue, parse_queue); "
            "repeat it for several. Default: all three.",
        ),
    ] = None,
) -> None:
    """Run a Celery worker (FORAGER_DISPATCH=celery): run the task ids RabbitMQ delivers with
    the same pipeline as `forager worker`, until SIGTERM."""
    import contextlib

    from forager.queue.door import QUEUES
    from forager.runtime import Runtime
    from forager.worker.consumer import CeleryWorker
    from forager.worker.pool import WorkerPool, new_worker_id

    settings = _settings()
    if settings.dispatch != "celery":
        raise ConfigError("`forager celery-worker` needs FORAGER_DISPATCH=celery")
    unknown = sorted(set(queue or ()) - set(QUEUES))
    if unknown:
        raise ConfigError(f"unknown queue {unknown[0]!r}: choose from {', '.join(QUEUES)}")
    slots = concurrency or settings.worker_concurrency

    @contextlib.asynccontextmanager
    async def open_pool() -> AsyncIterator[WorkerPool]:
        runtime = await Runtime.open(settings)
        try:
            yield runtime.worker_pool(
                slots, worker_id=new_worker_id("celery"), kind="celery", run_scheduler=False
            )
        finally:
            await runtime.aclose()

    CeleryWorker(settings, open_pool, concurrency=slots, queues=queue).run()


@app.command()
def relay() -> None:
    """Run the relay of Celery dispatch on its own: claim due tasks into the outbox and
    publish them to RabbitMQ, with the scheduler (expired leases, due recrawls), until SIGTERM."""
    from forager.runtime import Runtime
    from forager.worker.pool import new_worker_id

    settings = _settings()
    if settings.dispatch != "celery":
        raise ConfigError("`forager relay` needs FORAGER_DISPATCH=celery")

    async def _run() -> None:
        runtime = await Runtime.open(settings)
        try:
            pool = runtime.worker_pool(1, worker_id=new_worker_id("relay"), kind="relay")
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, pool.stop)
            await pool.run()
        finally:
            await runtime.aclose()

    asyncio.run(_run())


@app.command()
def crawl(
    urls: Annotated[list[str], typer.Argument(help="URLs to crawl.")],
    parser: Annotated[str | None, typer.Option(help="Parser for every URL.")] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write products as JSONL here.")
    ] = None,
    concurrency: Annotated[
        int,
        typer.Option(
            min=1,
            help="Requests in flight at once; as many fetched pages again may wait to be "
            "parsed and written meanwhile.",
        ),
    ] = 8,
    retries: Annotated[int, typer.Option(min=0, help="Retries per URL.")] = 1,
    selectors: Annotated[
        Path | None,
        typer.Option(
            help="A selector map (JSON file, docs/PARSERS.md) to read every page with, "
            "instead of --parser.",
            dir_okay=False,
        ),
    ] = None,
    fetcher: Annotated[
        str | None,
        typer.Option(
            help="Fetch every URL with this fetcher: http, impersonate, browser (Chromium: "
            "pages filled in by scripts) or auto (escalates when a page needs it).",
        ),
    ] = None,
) -> None:
    """Crawl URLs once, in-process, in a throwaway database; print the products found."""
    with _start_up(parses=True):
        from forager.errors import InvalidRequest
        from forager.fetch.fetcher_set import DOMAIN_FETCHERS
        from forager.oneshot import read_selector_map, run_crawl

        settings = _settings(quiet=True)
        if selectors is not None and parser is not None:
            raise _fail("--parser and --selectors: give one (a selector map is a parser)")
        if fetcher is not None and fetcher not in DOMAIN_FETCHERS:
            raise _fail(f"--fetcher {fetcher!r}: one of {', '.join(DOMAIN_FETCHERS)}")
        try:
            fields = None if selectors is None else read_selector_map(selectors)
        except InvalidRequest as exc:
            raise _fail(f"--selectors {selectors}: {exc.message}") from None
    code = asyncio.run(
        run_crawl(
            settings,
            urls,
            parser=parser,
            output=output,
            concurrency=concurrency,
            retries=retries,
            selectors=fields,
            fetcher=fetcher,
        )
    )
    # Everything is written and closed: the interpreter's last collection would only walk
    # every object once more before exiting (0.25 s after a 3,000-page crawl).
    gc.freeze()
    raise typer.Exit(code)


@app.command()
def parse(
    file: Annotated[Path, typer.Argument(help="A saved HTML page.", exists=True, dir_okay=False)],
    parser: Annotated[
        str | None, typer.Option(help="Parser name (default: chosen from --url's host).")
    ] = None,
    url: Annotated[str | None, typer.Option(help="The page's URL.")] = None,
) -> None:
    """Print the product record of a saved page as JSON (a page with items: an object with
    "product" and "items"), or say what the page is."""
    from forager.parse.items import result_json
    from forager.parse.registry import get_parser, parser_name_for_host
    from forager.queue.urls import normalize_url

    page_url = url or file.resolve().as_uri()
    if parser is None:
        parser = parser_name_for_host(normalize_url(url).host) if url else "generic"
    html = file.read_bytes().decode("utf-8", errors="replace")
    result = get_parser(parser).parse(html, page_url)
    typer.echo(json.dumps(result_json(result), ensure_ascii=False, indent=2))


@parsers_app.command("list")
def parsers_list(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per parser.")] = False,
) -> None:
    """Every parser with where it came from; a broken plugin is listed with its error."""
    from forager.parse.registry import entries

    # No logging set up (that imports the whole runtime): the list itself shows every error.
    logging.getLogger("forager.parse.plugins").setLevel(logging.ERROR)
    found = entries()
    for entry in found:
        if as_json:
            typer.echo(json.dumps(_parser_json(entry), ensure_ascii=False))
            continue
        origin = f"plugin {entry.dist} {entry.dist_version}" if entry.dist else entry.origin
        hosts = ", ".join(entry.hosts) or "-"
        if entry.parser is None:
            typer.secho(f"{entry.name}  BROKEN  {origin}  {entry.error}", fg=typer.colors.RED)
        else:
            typer.echo(f"{entry.name}  v{entry.version}  {origin}  hosts: {hosts}")
    if not as_json and any(e.parser is None for e in found):
        typer.echo("broken parsers are not used; every other parser works.", err=True)


def _parser_json(entry: ParserEntry) -> dict[str, object]:
    return {
        "name": entry.name,
        "version": entry.version,
        "origin": entry.origin,
        "reference": entry.reference,
        "dist": entry.dist,
        "dist_version": entry.dist_version,
        "hosts": list(entry.hosts),
        "error": entry.error,
    }


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the schema to the newest revision."""
    from forager.db.migrate import current_revision

    settings = _settings()
    revision = _with_db(settings, current_revision, create=True)
    typer.echo(f"database at revision {revision} ({_db_label(settings)})")


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[
        str | None,
        typer.Argument(help="The revision to go back to (e.g. 0025), or base (an empty database)."),
    ] = None,
    steps: Annotated[
        int | None, typer.Option(min=1, help="Go back this many revisions instead.")
    ] = None,
) -> None:
    """Take the schema back to an older revision (to run an older Forager on it); `serve` and
    the workers upgrade it again on start."""
    if (revision is None) == (steps is None):
        raise _fail("give either a REVISION or --steps N")
    target = revision if revision is not None else f"-{steps}"
    from alembic.util import CommandError

    from forager.db.migrate import current_revision, downgrade
    from forager.runtime import open_database

    settings = _settings()

    async def _run() -> str | None:
        # Not upgraded first, and a database that does not exist is refused, not created.
        db = await open_database(settings, migrate=False, create=False)
        try:
            await downgrade(db, target)
            return await current_revision(db)
        finally:
            await db.dispose()

    try:
        now = asyncio.run(_run())
    except CommandError as exc:
        raise _fail(f"cannot downgrade to {target!r}: {exc}") from None
    typer.echo(f"database at revision {now or 'base'} ({_db_label(settings)})")


@app.command()
def submit(
    file: Annotated[
        str,
        typer.Argument(
            metavar="FILE", help="A file of URLs (one a line) or JSON lines; - reads stdin."
        ),
    ],
    priority: Annotated[
        int | None, typer.Option(help="Priority of lines that set none (1 highest … 10).")
    ] = None,
    batch_name: Annotated[
        str | None, typer.Option(help="Batch name of lines that set none.")
    ] = None,
    parser: Annotated[str | None, typer.Option(help="Parser of lines that set none.")] = None,
    recurring: Annotated[
        bool | None, typer.Option("--recurring", help="Crawl again every --frequency seconds.")
    ] = None,
    frequency: Annotated[
        int | None, typer.Option(help="Recrawl period in seconds (default: the domain's).")
    ] = None,
    adaptive: Annotated[
        bool | None,
        typer.Option(
            "--adaptive",
            help="With --recurring: crawl sooner after a price or availability change, less "
            "often while nothing changes (docs/ALERTS.md).",
        ),
    ] = None,
    min_frequency: Annotated[
        int | None, typer.Option(help="Shortest adaptive frequency (default: a quarter).")
    ] = None,
    max_frequency: Annotated[
        int | None, typer.Option(help="Longest adaptive frequency (default: 7 times).")
    ] = None,
    tag: Annotated[
        list[str] | None,
        typer.Option(metavar="TAG", help="Tag of the lines' products (repeatable)."),
    ] = None,
    api: Annotated[
        str | None,
        typer.Option(
            help="Send to a running server's API (e.g. http://127.0.0.1:8000) instead of the "
            "database: works from any folder.",
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="FORAGER_API_KEY",
            help="An admin API key of that server (or FORAGER_API_KEY, which `ps` does not show).",
        ),
    ] = None,
) -> None:
    """Submit many URLs, with a progress bar: into the database (the one `forager serve` uses
    in this folder) or, with --api, through a running server. Prints created / duplicate /
    invalid counts (each invalid line on stderr, and exit status 1 when there is one)."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    from forager import bulk

    options = bulk.defaults(
        priority=priority,
        batch_name=batch_name,
        parser_name=parser,
        is_recurring=recurring,
        crawl_frequency_seconds=frequency,
        adaptive_recrawl=adaptive,
        min_crawl_frequency_seconds=min_frequency,
        max_crawl_frequency_seconds=max_frequency,
        tags=tag or None,
    )
    remote = None
    if api is not None:
        from forager.bulk_remote import RemoteSubmit

        remote = RemoteSubmit(api, api_key or "")
    source = sys.stdin if file == "-" else _open_text(Path(file))
    total = None if file == "-" else Path(file).stat().st_size
    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn())
    with source, Progress(*columns, console=console, disable=not console.is_terminal) as bar:
        shown = bar.add_task("submitting", total=total)

        def progress(read: int, totals: bulk.Totals) -> None:
            summary = f"created {totals.created}, duplicate {totals.duplicate}, "
            bar.update(shown, completed=read, description=summary + f"invalid {totals.invalid}")

        if remote is not None:
            totals = asyncio.run(remote.submit_lines(source, options, progress=progress))
        else:
            settings = _settings(quiet=True)
            try:
                totals = _with_db(
                    settings,
                    lambda db: bulk.submit_lines(db, settings, source, options, progress=progress),
                )
            except ConfigError as exc:
                if not exc.message.startswith("no Forager database"):
                    raise
                raise ConfigError(
                    f"{exc.message}; or send to a running server with `forager submit --api URL`"
                ) from exc
    for line, why in sorted(totals.problems)[:100]:
        typer.echo(f"line {line}: {why}", err=True)
    if len(totals.problems) > 100:
        typer.echo(f"… and {len(totals.problems) - 100} more invalid lines", err=True)
    typer.echo(f"created {totals.created}, duplicate {totals.duplicate}, invalid {totals.invalid}")
    if totals.invalid:
        raise typer.Exit(1)


def _open_text(path: Path) -> TextIO:
    try:
        return path.open(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc


@pages_app.command("prune")
def pages_prune(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only count what would be deleted.")
    ] = False,
    keep_last: Annotated[
        int | None,
        typer.Option(
            min=0, help="Newest pages kept per task (default FORAGER_PAGE_RETENTION_KEEP_LAST)."
        ),
    ] = None,
    days: Annotated[
        float | None,
        typer.Option(
            min=0, help="Pages younger than this kept (default FORAGER_PAGE_RETENTION_DAYS)."
        ),
    ] = None,
) -> None:
    """Delete stored pages past retention now; a task's latest page is never deleted."""
    from forager.store.retention import Retention, prune

    settings = _settings()
    rules = Retention(
        settings.page_retention_keep_last if keep_last is None else keep_last,
        settings.page_retention_days if days is None else days,
    )
    if not rules.on:
        raise _fail(
            "retention is off: set FORAGER_PAGE_RETENTION_KEEP_LAST or FORAGER_PAGE_RETENTION_DAYS "
            "(or pass --keep-last / --days)"
        )
    pruned = _with_runtime(
        settings, lambda runtime: prune(runtime.db, runtime.pages, rules, dry_run=dry_run)
    )
    verb = "would delete" if dry_run else "deleted"
    typer.echo(f"{verb} {pruned.pages} stored pages ({pruned.bytes} bytes)")
    if pruned.failed:
        raise _fail(f"{pruned.failed} pages could not be deleted from the store (see the log)")


@app.command("prune")
def prune_rows(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only count what would be deleted.")
    ] = False,
) -> None:
    """Delete rows past retention now (events, attempts, price repeats, monitor snapshots,
    alert deliveries), in bounded batches; prints the rows per table."""
    from forager.retention.prune import prune

    settings = _settings()
    pruned = _with_db(settings, lambda db: prune(db, settings, dry_run=dry_run))
    verb = "would delete" if dry_run else "deleted"
    for table, rows in pruned.rows.items():
        typer.echo(f"{table}: {verb} {rows} rows")
    typer.echo(f"total: {verb} {pruned.total} rows")


@apikey_app.command("create")
def apikey_create(
    name: Annotated[str, typer.Option(help="Who or what uses the key.")],
    role: Annotated[str, typer.Option(help="admin (may change things) or read.")] = "read",
) -> None:
    """Create an API key and print it once; only its hash is stored."""
    from forager.apikeys import create_key

    settings = _settings(quiet=True)
    _, key = _with_db(settings, lambda db: create_key(db, name, role))
    typer.echo(key)
    typer.echo(
        f"API key {name!r} ({role}) created. It is shown only now: store it safely.", err=True
    )


@apikey_app.command("list")
def apikey_list() -> None:
    """List API keys (names, roles, prefixes; never the keys)."""
    from forager.apikeys import list_keys

    settings = _settings(quiet=True)
    for key in _with_db(settings, list_keys):
        state = f"revoked {key.revoked_at.isoformat()}" if key.revoked_at else "active"
        typer.echo(f"{key.name}\t{key.role}\t{key.key_prefix}…\t{state}")


@apikey_app.command("revoke")
def apikey_revoke(name: Annotated[str, typer.Argument(help="The key's name.")]) -> None:
    """Revoke an API key: it stops working at once."""
    from forager.apikeys import revoke_key

    settings = _settings(quiet=True)
    _with_db(settings, lambda db: revoke_key(db, name))
    typer.echo(f"API key {name!r} revoked")


def _rule(text: str) -> dict[str, object]:
    """``ACTION=PATTERN`` (an RE2 regex), ``ACTION=glob:PATTERN``; ``@CSS`` at the end takes
    the links from that region only; ``parse/SECONDS=…`` recrawls the rule's pages that often."""
    action, sep, pattern = text.partition("=")
    if not sep:
        raise _fail(f"rule {text!r}: expected ACTION=PATTERN (follow, parse or ignore)")
    action, _, every = action.partition("/")
    if every and not every.isdigit():
        raise _fail(f"rule {text!r}: expected parse/SECONDS=PATTERN for a recrawl schedule")
    pattern, _, region = pattern.partition("@")
    syntax = "regex"
    if pattern.startswith("glob:"):
        syntax, pattern = "glob", pattern.removeprefix("glob:")
    rule: dict[str, object] = {
        "action": action,
        "pattern": pattern,
        "syntax": syntax,
        "region": region or None,
    }
    if every:
        rule["recrawl_seconds"] = int(every)
    return rule


def _show_job(job: object) -> None:
    from forager.db.models import CrawlJob

    assert isinstance(job, CrawlJob)
    typer.echo(
        f"{job.id}\t{job.name}\t{job.status}\t{job.pages_queued}/{job.max_pages} pages"
        f"\tstarted {job.started_at.isoformat(timespec='seconds')}"
    )


@job_app.command("start")
def job_start(
    name: Annotated[str, typer.Option(help="What the job is for.")],
    start_url: Annotated[list[str], typer.Option(help="A page to start from (repeat).")],
    rule: Annotated[
        list[str],
        typer.Option(
            help="ACTION=PATTERN, ACTION=glob:PATTERN, …@CSS, parse/SECONDS=… (a recrawl "
            "schedule); in order (repeat)."
        ),
    ],
    scope: Annotated[str, typer.Option(help="host, domain or hosts.")] = "host",
    host: Annotated[list[str] | None, typer.Option(help="A host of scope 'hosts'.")] = None,
    max_depth: Annotated[int, typer.Option(help="Links deeper than this are not queued.")] = 5,
    max_pages: Annotated[int, typer.Option(help="Tasks the job queues at most.")] = 10_000,
    max_duration: Annotated[int, typer.Option(help="Seconds the job queues links for.")] = 86_400,
    follow_nofollow: Annotated[bool, typer.Option(help="Take rel=nofollow links too.")] = False,
    sitemap: Annotated[list[str] | None, typer.Option(help="A sitemap URL (repeat).")] = None,
    robots_sitemaps: Annotated[
        bool, typer.Option(help="Read the start hosts' robots.txt Sitemap: lines too.")
    ] = False,
    rerun_every: Annotated[
        int | None,
        typer.Option(help="Seconds from each run's start to the next (once it is done)."),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(help="'Name: value', sent with every fetch of the job (repeat)."),
    ] = None,
    cookie: Annotated[
        list[str] | None, typer.Option(help="NAME=VALUE, sent with every fetch (repeat).")
    ] = None,
    secret_header: Annotated[
        list[str] | None, typer.Option(help="As --header, stored encrypted, never shown.")
    ] = None,
    secret_cookie: Annotated[
        list[str] | None, typer.Option(help="As --cookie, stored encrypted, never shown.")
    ] = None,
    user_agent: Annotated[
        str | None, typer.Option(help="Instead of the domains' user agents.")
    ] = None,
) -> None:
    """Start a crawl job; its start URLs are queued now, the links its rules take as the
    workers crawl them. --header, --cookie and --user-agent go over the domains' request
    profiles for every task of the job."""
    from forager.discovery.jobs import JobSpec, start

    settings = _settings(quiet=True)
    given = _job_profile(header, cookie, secret_header, secret_cookie, user_agent)
    spec = JobSpec(
        name=name,
        start_urls=tuple(start_url),
        sitemap_urls=tuple(sitemap or ()),
        scope=scope,
        hosts=tuple(host or ()),
        rules=tuple(_rule(r) for r in rule),
        follow_nofollow=follow_nofollow,
        robots_sitemaps=robots_sitemaps,
        max_depth=max_depth,
        max_pages=max_pages,
        max_duration_seconds=max_duration,
        rerun_every_seconds=rerun_every,
        created_by="cli",
        request_profile=None if given is None else _sealed_profile(settings, given),
    )
    _show_job(_with_db(settings, lambda db: start(db, settings, spec)))


def _job_profile(
    header: list[str] | None,
    cookie: list[str] | None,
    secret_header: list[str] | None,
    secret_cookie: list[str] | None,
    user_agent: str | None,
) -> dict[str, Any] | None:
    """The request profile of ``forager job start``'s options, checked as the API checks a
    task's (``TaskProfileIn``); None when none is given."""
    from pydantic import ValidationError

    from forager.api.profile_schemas import TaskProfileIn

    headers, cookies = [], []
    given_headers = [(h, False) for h in header or []] + [(h, True) for h in secret_header or []]
    given_cookies = [(c, False) for c in cookie or []] + [(c, True) for c in secret_cookie or []]
    for raw, secret in given_headers:
        name, sep, value = raw.partition(":")
        if not sep:
            raise _fail(f"--header {raw!r}: give 'Name: value'")
        headers.append({"name": name.strip(), "value": value.strip(), "secret": secret})
    for raw, secret in given_cookies:
        name, sep, value = raw.partition("=")
        if not sep:
            raise _fail(f"--cookie {raw!r}: give NAME=VALUE")
        cookies.append({"name": name.strip(), "value": value, "secret": secret})
    if not headers and not cookies and user_agent is None:
        return None
    try:
        checked = TaskProfileIn.model_validate(
            {"headers": headers, "cookies": cookies, "user_agent": user_agent}
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise _fail(f"request profile {where}: {first['msg']}") from None
    return checked.model_dump()


def _sealed_profile(settings: Settings, given: dict[str, Any]) -> dict[str, Any] | None:
    from forager.crypto import SecretBox
    from forager.domains.profile import seal

    return seal(given, SecretBox(settings), None, "request_profile") or None


@job_app.command("list")
def job_list() -> None:
    """Crawl jobs, newest first: id, name, status, pages queued of the budget, start."""
    from forager.discovery.admin import list_page

    settings = _settings(quiet=True)
    for job in _with_db(settings, lambda db: list_page(db, limit=10_000, offset=0))[0]:
        _show_job(job)


@job_app.command("show")
def job_show(job_id: Annotated[int, typer.Argument(help="The job's id.")]) -> None:
    """A job and its progress, in all and by depth."""
    from forager.discovery.admin import show

    settings = _settings(quiet=True)
    job, found = _with_db(settings, lambda db: show(db, job_id))
    _show_job(job)
    typer.echo(
        f"discovered {found.discovered}  queued {found.queued}  in flight {found.in_flight}  "
        f"fetched {found.fetched}  parsed {found.parsed}  products {found.products}  "
        f"errors {found.errors}  links seen {job.links_seen}  refused {job.links_refused}"
    )
    for depth, counts in sorted(found.by_depth.items()):
        typer.echo(f"  depth {depth}: " + "  ".join(f"{k} {v}" for k, v in counts.items()))


def _job_action(job_id: int, action: str) -> None:
    from forager.discovery.admin import act

    settings = _settings(quiet=True)
    _show_job(_with_db(settings, lambda db: act(db, job_id, action)))


@job_app.command("pause")
def job_pause(job_id: Annotated[int, typer.Argument(help="The job's id.")]) -> None:
    """Hold the job's waiting tasks."""
    _job_action(job_id, "pause")


@job_app.command("resume")
def job_resume(job_id: Annotated[int, typer.Argument(help="The job's id.")]) -> None:
    """Give the job's paused tasks back to the queue."""
    _job_action(job_id, "resume")


@job_app.command("rerun")
def job_rerun(job_id: Annotated[int, typer.Argument(help="The job's id.")]) -> None:
    """Run a done or cancelled job again: only what changed (sitemap lastmod) is recrawled."""
    from forager.discovery.admin import rerun

    settings = _settings(quiet=True)
    _show_job(_with_db(settings, lambda db: rerun(db, settings, job_id)))


@job_app.command("cancel")
def job_cancel(job_id: Annotated[int, typer.Argument(help="The job's id.")]) -> None:
    """Cancel the job and its waiting tasks."""
    _job_action(job_id, "cancel")


def _show_batch(batch: object) -> None:
    from forager.queue.door import BatchProgress

    assert isinstance(batch, BatchProgress)
    typer.echo(
        f"{batch.name}\t{batch.state}\t{batch.done}/{batch.total} done\t{batch.paused} paused"
        f"\t{batch.products} products\tstarted {batch.started_at.isoformat(timespec='seconds')}"
    )


def _figures(figures: dict[str, int]) -> str:
    return "  ".join(f"{k} {v}" for k, v in sorted(figures.items())) or "none"


@batch_app.command("list")
def batch_list() -> None:
    """Batches, newest first: name, state, tasks done of all, paused, products, start."""
    from forager.queue.door import list_batches

    settings = _settings(quiet=True)
    for batch in _with_db(settings, lambda db: list_batches(db, limit=10_000, offset=0))[0]:
        _show_batch(batch)


@batch_app.command("show")
def batch_show(name: Annotated[str, typer.Argument(help="The batch's name.")]) -> None:
    """A batch's progress: tasks by status, failures by error type, pace and estimated end."""
    from forager.queue.door import show_batch

    settings = _settings(quiet=True)
    batch = _with_db(settings, lambda db: show_batch(db, name))
    _show_batch(batch)
    typer.echo(f"  by status: {_figures(batch.by_status)}")
    typer.echo(f"  failures: {_figures(batch.failures)}")
    pace = "none lately" if batch.pages_per_minute is None else f"{batch.pages_per_minute}/min"
    end = batch.estimated_end.isoformat(timespec="seconds") if batch.estimated_end else "-"
    typer.echo(f"  pages: {pace}  estimated end: {end}")


def _batch_move(name: str, action: BatchAction) -> None:
    from forager.queue.door import move_batch, show_batch

    settings = _settings(quiet=True)

    async def work(db: Database) -> tuple[BatchMoved, BatchProgress]:
        return await move_batch(db, name, action, by="cli"), await show_batch(db, name)

    done, batch = _with_db(settings, work)
    typer.echo(f"{done.moved} tasks of batch {name!r} moved to {done.to}")
    _show_batch(batch)


@batch_app.command("pause")
def batch_pause(name: Annotated[str, typer.Argument(help="The batch's name.")]) -> None:
    """Hold the batch's waiting and running tasks (workers drop those in flight)."""
    _batch_move(name, "pause")


@batch_app.command("resume")
def batch_resume(name: Annotated[str, typer.Argument(help="The batch's name.")]) -> None:
    """Give the batch's paused tasks back to the queue."""
    _batch_move(name, "resume")


@batch_app.command("cancel")
def batch_cancel(name: Annotated[str, typer.Argument(help="The batch's name.")]) -> None:
    """Cancel the batch's tasks not yet finished; finished ones keep their status."""
    _batch_move(name, "cancel")


@batch_app.command("restart")
def batch_restart(
    name: Annotated[str, typer.Argument(help="The batch's name.")],
    all_tasks: Annotated[
        bool, typer.Option("--all", help="Every finished task, not only the failed ones.")
    ] = False,
) -> None:
    """Crawl the batch's failed tasks again (with --all: every completed, failed or cancelled
    one)."""
    _batch_move(name, "restart_all" if all_tasks else "restart_failed")


def _show_agent(agent: object) -> None:
    from forager.db.models import Agent

    assert isinstance(agent, Agent)
    state = f"revoked {agent.revoked_at.isoformat()}" if agent.revoked_at else agent.status
    seen = agent.last_heartbeat_at.isoformat() if agent.last_heartbeat_at else "never"
    typer.echo(
        f"{agent.id}\t{agent.name}\t{agent.token_prefix}…\t{state}\t{agent.external_ip or '-'}"
        f"\t{seen}\t{agent.tasks_completed_count} done / {agent.tasks_failed_count} failed"
    )


@agent_app.command("create")
def agent_create(
    name: Annotated[str, typer.Option(help="1–100 letters, digits, spaces or hyphens.")],
) -> None:
    """Register an agent and print its token once; only a hash is stored."""
    from forager.agents.admin import create_agent

    settings = _settings(quiet=True)
    agent, token = _with_db(settings, lambda db: create_agent(db, name))
    typer.echo(token)
    typer.echo(
        f"agent {name!r} created (id {agent.id}). The token is shown only now: store it safely, "
        f"then run `forager agent run --server URL --token TOKEN` on the agent's machine.",
        err=True,
    )


@agent_app.command("list")
def agent_list() -> None:
    """List agents: id, name, token prefix, status, IP, last heartbeat, task counts."""
    from forager.agents.admin import list_agents

    settings = _settings(quiet=True)

    async def rows(db: Database) -> list[object]:
        async with db.reader() as session:
            return list((await list_agents(session, limit=10_000))[0])

    for agent in _with_db(settings, rows):
        _show_agent(agent)


@agent_app.command("revoke")
def agent_revoke(ref: Annotated[str, typer.Argument(help="The agent's id or name.")]) -> None:
    """Revoke an agent: its token is refused and its live connection closed."""
    from forager.agents.admin import find_agent, revoke_agent

    settings = _settings(quiet=True)

    async def revoke(db: Database) -> object:
        return await revoke_agent(db, (await find_agent(db, ref)).id)

    _with_db(settings, revoke)
    typer.echo(f"agent {ref!r} revoked")


@agent_app.command("rotate-token")
def agent_rotate(ref: Annotated[str, typer.Argument(help="The agent's id or name.")]) -> None:
    """Give an agent a new token (printed once); the old one stops working."""
    from forager.agents.admin import find_agent, rotate_token

    settings = _settings(quiet=True)

    async def rotate(db: Database) -> str:
        return (await rotate_token(db, (await find_agent(db, ref)).id))[1]

    typer.echo(_with_db(settings, rotate))
    typer.echo(f"agent {ref!r} has a new token; the old one is refused from now on.", err=True)


@agent_app.command("reset")
def agent_reset(ref: Annotated[str, typer.Argument(help="The agent's id or name.")]) -> None:
    """Manual reset of a blocked agent (blocked → connected): it gets tasks again."""
    from forager.agents.admin import find_agent, reset_agent

    settings = _settings(quiet=True)

    async def reset(db: Database) -> object:
        return await reset_agent(db, (await find_agent(db, ref)).id)

    _with_db(settings, reset)
    typer.echo(f"agent {ref!r} reset")


@agent_app.command("run")
def agent_run(
    server: Annotated[str, typer.Option(help="The server's base URL, http(s)://host:port.")],
    token: Annotated[
        str,
        typer.Option(
            envvar="FORAGER_AGENT_TOKEN",
            help="The agent's token (or FORAGER_AGENT_TOKEN, which `ps` does not show).",
        ),
    ],
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="Fetches at once.")] = 1,
    allow_domain: Annotated[
        list[str] | None,
        typer.Option(help="Only fetch for this host (repeatable); other tasks are returned."),
    ] = None,
    isp: Annotated[str | None, typer.Option(help="ISP name to report (e.g. Vivo).")] = None,
    ip_echo_url: Annotated[
        str | None, typer.Option(help="URL answering with this machine's external IP as text.")
    ] = None,
    shutdown_seconds: Annotated[
        float, typer.Option(min=0, help="On SIGTERM: how long tasks in hand may still run.")
    ] = 30.0,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING or ERROR.")] = "INFO",
    private_targets: Annotated[
        str,
        typer.Option(
            envvar="FORAGER_PRIVATE_TARGETS",
            help="Non-public addresses of this machine's network the agent may fetch: "
            "submitted (only a task's own host; redirects into them are refused), all, none.",
        ),
    ] = "submitted",
    fetcher: Annotated[
        list[str] | None,
        typer.Option(
            help="Fetch with only these (repeatable: http, impersonate, browser). Default: "
            "http and impersonate, and browser when Chromium is at --chromium-path.",
        ),
    ] = None,
    chromium_path: Annotated[
        Path,
        typer.Option(envvar="FORAGER_CHROMIUM_PATH", help="This machine's Chromium."),
    ] = Path("/usr/bin/chromium"),
) -> None:
    """Run a home-network agent: connect out to the server and fetch the tasks it pushes."""
    import logging

    from forager.agents.client import AgentClient

    if log_level.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        raise ConfigError("--log-level must be one of DEBUG, INFO, WARNING, ERROR")
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)-7s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        agent = AgentClient(
            server,
            token,
            concurrency=concurrency,
            allow_domains=allow_domain,
            isp=isp,
            ip_echo_url=ip_echo_url,
            shutdown_seconds=shutdown_seconds,
            private_targets=private_targets,
            fetchers=fetcher,
            chromium_path=chromium_path,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc

    async def _run() -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, agent.stop)
        code = await agent.run()
        for sig in (signal.SIGTERM, signal.SIGINT):  # a repeated signal must not kill the exit
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_IGN)
        return code

    raise typer.Exit(asyncio.run(_run()))


# -- missions (issue 16) -------------------------------------------------------------------


@app.command()
def orchestrate(
    start: Annotated[
        bool, typer.Option(help="Request a run first, as the dashboard's Start button does.")
    ] = True,
    forever: Annotated[
        bool, typer.Option(help="Stand by after the run ends (as `forager serve` does).")
    ] = False,
) -> None:
    """Run the mission orchestrator here until the run ends (no mission queued or running).

    A mission is one ad-library search (a date range, a media type, languages) that a worker
    service scrapes and a writer stores; the orchestrator hands queued missions to them.
    When another process holds the loop's lease this one waits, and takes over if it dies.
    """
    from forager.missions import control
    from forager.runtime import Runtime

    settings = _settings()

    async def _run() -> None:
        runtime = await Runtime.open(settings, create=False)
        runner = runtime.mission_runner()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, runner.stop)
        try:
            if start:
                await control.request_run(runtime.db, "cli")
            await runner.run(until_idle=not forever)
        finally:
            await runtime.aclose()

    asyncio.run(_run())
    typer.echo("orchestrator: no run requested any more", err=True)


ServiceHost = Annotated[str, typer.Option("--host", help="Address to bind.")]
PortFile = Annotated[
    Path | None, typer.Option("--port-file", help="Write the bound port here once listening.")
]


def _service_key() -> str:
    import os

    key = os.environ.get("FORAGER_SERVICE_API_KEY", "")
    if not key:
        raise ConfigError("FORAGER_SERVICE_API_KEY must hold the API key callers send as x-api-key")
    return key


@app.command("worker-service")
def worker_service(
    target: Annotated[str, typer.Option(help="Base URL of the site the scraper reads.")],
    host: ServiceHost = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: a free one).")] = 8081,
    port_file: PortFile = None,
    storage_dir: Annotated[
        Path | None, typer.Option(help="Where results are written (default <data dir>/storage).")
    ] = None,
    scraper: Annotated[str, typer.Option(help="Mission scraper: ad-library.")] = "ad-library",
    timeout: Annotated[float, typer.Option(min=0.1, help="Timeout of one page fetch.")] = 30.0,
    allow_faults: Annotated[
        bool, typer.Option(help="Accept POST /faults (makes sessions and jobs misbehave; tests).")
    ] = False,
) -> None:
    """Run the reference worker service: it scrapes missions from the ad library at --target
    for the orchestrator; callers send FORAGER_SERVICE_API_KEY."""
    from forager.missions.reference import scraper as scrapers
    from forager.missions.reference.serve import run
    from forager.missions.reference.worker_app import create_app

    if scraper not in scrapers.SCRAPERS:
        raise ConfigError(f"--scraper must be one of {', '.join(scrapers.SCRAPERS)}")
    settings = _settings()
    storage = storage_dir or settings.data_dir / "storage"
    storage.mkdir(parents=True, exist_ok=True)
    app_ = create_app(
        api_key=_service_key(),
        target=target,
        storage=storage,
        scraper=scraper,
        timeout=timeout,
        allow_faults=allow_faults,
    )
    run(app_, host, port, port_file)


@app.command("writer-service")
def writer_service(
    host: ServiceHost = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: a free one).")] = 8082,
    port_file: PortFile = None,
    database_url: Annotated[
        str | None, typer.Option(help="Database to write (default: Forager's own).")
    ] = None,
    table: Annotated[
        list[str] | None, typer.Option(help="A table it may write (repeatable; default ads).")
    ] = None,
    batch_size: Annotated[int, typer.Option(min=1, max=10_000, help="Rows per upsert.")] = 150,
    max_download_mb: Annotated[
        int, typer.Option(min=1, max=4096, help="Largest JSON it downloads.")
    ] = 64,
) -> None:
    """Run the reference writer: it stores the ads a worker service scraped into a table;
    callers send FORAGER_SERVICE_API_KEY."""
    from forager.config import load_settings
    from forager.db.engine import Database
    from forager.missions.reference.serve import run
    from forager.missions.reference.tables import AllowedTable, Refused, reflect
    from forager.missions.reference.writer_app import create_app
    from forager.runtime import Runtime

    settings = _settings()
    key = _service_key()

    async def _tables() -> tuple[Database, dict[str, AllowedTable]]:
        runtime: Runtime | None = None
        if database_url:  # someone else's database: used as it is, never migrated
            db = Database(load_settings(database_url=database_url).resolved_database_url)
        else:
            runtime = await Runtime.open(settings)
            db = runtime.db
        try:
            return db, await reflect(db.engine, table or ["ads"])
        except Refused as exc:
            raise ConfigError(str(exc)) from exc
        finally:  # the app's own loop reconnects
            await (runtime.aclose() if runtime is not None else db.dispose())

    db, allowed = asyncio.run(_tables())
    app_ = create_app(
        api_key=key,
        db=db,
        tables=allowed,
        batch_size=batch_size,
        max_bytes=max_download_mb * 1024 * 1024,
    )
    run(app_, host, port, port_file)


def _show_feed(feed: object) -> None:
    from forager.db.models import Feed

    assert isinstance(feed, Feed)
    where = f"{feed.destination}:{feed.path or '.'}"
    state = "enabled" if feed.enabled else "disabled"
    typer.echo(
        f"{feed.id}\t{feed.name}\t{feed.kind}\t{feed.format}\t{where}\tevery "
        f"{feed.interval_seconds} s\t{state}\tcursor {feed.cursor}"
    )


def _show_run(run: object) -> None:
    from forager.db.models import FeedRun

    assert isinstance(run, FeedRun)
    typer.echo(
        f"{run.id}\t{run.status}\t({run.from_seq}, {run.to_seq}]\t{run.rows} rows\t"
        f"{run.file or '-'}\t{run.error or ''}".rstrip()
    )


@feed_app.command("create")
def feed_create(
    name: Annotated[str, typer.Option(help="What the feed is for.")],
    kind: Annotated[str, typer.Option(help="products, items or price_changes.")],
    fmt: Annotated[str, typer.Option("--format", help="jsonl, csv or parquet.")] = "jsonl",
    destination: Annotated[str, typer.Option(help="directory or store.")] = "directory",
    path: Annotated[str, typer.Option(help="Folder under <data_dir>/feeds, or store prefix.")] = "",
    interval: Annotated[int, typer.Option(help="Seconds between runs (at least 60).")] = 3600,
    domain: Annotated[str | None, typer.Option(help="Only this domain's rows.")] = None,
    batch: Annotated[str | None, typer.Option(help="Only rows of this batch's tasks.")] = None,
    tag: Annotated[str | None, typer.Option(help="Only products with this tag.")] = None,
    item_kind: Annotated[str | None, typer.Option(help="Only items of this kind.")] = None,
) -> None:
    """Create a feed; its first run (every row so far) is due at once."""
    from forager.errors import InvalidRequest
    from forager.feeds.admin import FeedSpec, create

    choices = {
        "kind": (kind, ("products", "items", "price_changes")),
        "format": (fmt, ("jsonl", "csv", "parquet")),
        "destination": (destination, ("directory", "store")),
    }
    for field, (value, allowed) in choices.items():
        if value not in allowed:
            raise InvalidRequest(f"--{field}: one of {', '.join(allowed)}", field=field)
    spec = FeedSpec(
        name=name,
        kind=kind,
        format=fmt,
        destination=destination,
        path=path,
        interval_seconds=interval,
        domain=domain,
        batch_name=batch,
        tag=tag,
        item_kind=item_kind,
    )
    settings = _settings(quiet=True)
    _show_feed(_with_db(settings, lambda db: create(db, spec)))


@feed_app.command("list")
def feed_list() -> None:
    """Feeds: id, name, kind, format, destination, interval, state, cursor."""
    from forager.feeds.admin import list_page

    settings = _settings(quiet=True)
    for feed in _with_db(settings, lambda db: list_page(db, limit=10_000, offset=0))[0]:
        _show_feed(feed)


@feed_app.command("runs")
def feed_runs(
    feed_id: Annotated[int, typer.Argument(help="The feed's id.")],
    limit: Annotated[int, typer.Option(min=1, help="Newest runs to show.")] = 20,
) -> None:
    """The feed's runs, newest first: status, range, rows, file, error."""
    from forager.feeds.admin import runs

    settings = _settings(quiet=True)
    for run in _with_db(settings, lambda db: runs(db, feed_id, limit=limit, offset=0))[0]:
        _show_run(run)


@feed_app.command("run")
def feed_run(feed_id: Annotated[int, typer.Argument(help="The feed's id.")]) -> None:
    """Run the feed now, due or not (an unfinished run is done first); exit 1 if it failed."""
    from forager.feeds.runs import run_now

    settings = _settings(quiet=True)
    run = _with_runtime(settings, lambda rt: run_now(rt.db, rt.settings, rt.parts.pages, feed_id))
    _show_run(run)
    if run.status != "succeeded":
        raise typer.Exit(1)


@feed_app.command("delete")
def feed_delete(feed_id: Annotated[int, typer.Argument(help="The feed's id.")]) -> None:
    """Delete the feed and its runs' history (the files it wrote stay)."""
    from forager.feeds.admin import remove

    settings = _settings(quiet=True)
    _with_db(settings, lambda db: remove(db, feed_id))
    typer.echo(f"feed {feed_id} deleted")


def main() -> None:
    """Entry point: click handles usage errors itself; Forager errors print as one line."""
    try:
        app()
    except ForagerError as exc:
        if _state["debug"]:
            raise
        raise SystemExit(_fail(exc.message).exit_code) from None
    except Exception as exc:
        if _state["debug"]:
            raise
        raise SystemExit(_fail(f"{type(exc).__name__}: {exc}").exit_code) from None


if __name__ == "__main__":
    main()
