"""The ``forager`` command line. Errors print as one line; ``--debug`` shows the traceback."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from forager import __version__
from forager.config import Settings, get_settings
from forager.errors import ConfigError, ForagerError

if TYPE_CHECKING:
    from forager.db.engine import Database

app = typer.Typer(
    help="Forager: a self-hosted scraping control plane.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
app.add_typer(db_app, name="db")
apikey_app = typer.Typer(help="API keys for the /api endpoints.", no_args_is_help=True)
app.add_typer(apikey_app, name="apikey")

_state = {"debug": False}


def _fail(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(1)


def _settings(quiet: bool = False) -> Settings:
    from forager.runtime import configure_logging

    settings = get_settings()
    configure_logging(settings, quiet=quiet and not _state["debug"])
    return settings


T = TypeVar("T")


def _with_db(settings: Settings, work: Callable[[Database], Awaitable[T]]) -> T:
    """Run ``work`` against the migrated database, then close it."""
    from forager.runtime import open_database

    async def _run() -> T:
        db = await open_database(settings)
        try:
            return await work(db)
        finally:
            await db.dispose()

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
    """Run the API, the scheduler and the built-in worker pool."""
    import uvicorn

    from forager.api.app import create_app

    settings = _settings()
    host = host or settings.host
    port = port or settings.port
    from forager.apikeys import any_active_key

    if not _is_loopback(host) and not _with_db(settings, any_active_key):
        raise ConfigError(
            f"refusing to bind {host}: no API key exists, so anyone who can reach it could "
            "control Forager; create one with `forager apikey create --name NAME --role admin`"
        )
    typer.echo(f"Forager {__version__} on http://{host}:{port} (database: {_db_label(settings)})")
    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")


def _db_label(settings: Settings) -> str:
    from forager.db.engine import database_label

    return database_label(settings.resolved_database_url)


@app.command()
def worker(
    concurrency: Annotated[
        int | None, typer.Option(min=1, help="Tasks in flight at once (default 8).")
    ] = None,
) -> None:
    """Run a worker process: claim tasks from the database and crawl them until SIGTERM."""
    from forager.runtime import open_database
    from forager.worker.pool import WorkerPool

    settings = _settings()

    async def _run() -> None:
        db = await open_database(settings)
        pool = WorkerPool(db, settings, concurrency=concurrency or settings.worker_concurrency)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, pool.stop)
        try:
            await pool.run()
        finally:
            await db.dispose()

    asyncio.run(_run())


@app.command()
def crawl(
    urls: Annotated[list[str], typer.Argument(help="URLs to crawl.")],
    parser: Annotated[str | None, typer.Option(help="Parser for every URL.")] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write products as JSONL here.")
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Tasks in flight at once.")] = 8,
    retries: Annotated[int, typer.Option(min=0, help="Retries per URL.")] = 1,
) -> None:
    """Crawl URLs once, in-process, in a throwaway database; print the products found."""
    from forager.oneshot import run_crawl

    settings = _settings(quiet=True)
    code = asyncio.run(
        run_crawl(
            settings, urls, parser=parser, output=output, concurrency=concurrency, retries=retries
        )
    )
    raise typer.Exit(code)


@app.command()
def parse(
    file: Annotated[Path, typer.Argument(help="A saved HTML page.", exists=True, dir_okay=False)],
    parser: Annotated[
        str | None, typer.Option(help="Parser name (default: chosen from --url's host).")
    ] = None,
    url: Annotated[str | None, typer.Option(help="The page's URL.")] = None,
) -> None:
    """Print the product record of a saved page as JSON (or say what the page is)."""
    from forager.parse.registry import get_parser, parser_name_for_host
    from forager.queue.urls import normalize_url

    page_url = url or file.resolve().as_uri()
    if parser is None:
        parser = parser_name_for_host(normalize_url(url).host) if url else "generic"
    html = file.read_bytes().decode("utf-8", errors="replace")
    record = get_parser(parser).parse(html, page_url)
    typer.echo(json.dumps(record.to_json(), ensure_ascii=False, indent=2))


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the schema to the newest revision."""
    from forager.db.migrate import current_revision

    settings = _settings()
    revision = _with_db(settings, current_revision)
    typer.echo(f"database at revision {revision} ({_db_label(settings)})")


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
