"""One translation of errors into ``application/problem+json`` (RFC 9457) for the whole API."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from forager.api.wire import message_of
from forager.errors import (
    Conflict,
    ForagerError,
    Forbidden,
    InvalidRequest,
    InvalidURL,
    LifecycleConflict,
    NotFound,
    Unauthorized,
)

log = logging.getLogger(__name__)
PROBLEM = "application/problem+json"


def problem(status: int, title: str, detail: str, **extra: Any) -> JSONResponse:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}
    return JSONResponse(body, status_code=status, media_type=PROBLEM)


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route fully serves at the request's path (routers nest, so each
    method is tried against the app's own routing)."""
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        routes = request.app.router.routes
        if any(isinstance(r, BaseRoute) and r.matches(scope)[0] == Match.FULL for r in routes):
            allowed.append(method)
    return allowed


def _not_json(error: Any, body: Any) -> dict[str, str]:
    """A body that is not JSON: the parser's reason and where, as line and column (the
    character offset FastAPI puts in the location is no field)."""
    reason = str(error.get("ctx", {}).get("error") or "cannot be parsed")
    where = ""
    position = error["loc"][-1]
    if isinstance(body, str) and isinstance(position, int):
        line = body.count("\n", 0, position) + 1
        column = position - body.rfind("\n", 0, position)
        where = f" at line {line} column {column}"
    return {"field": "body", "message": f"request body is not valid JSON: {reason}{where}"}


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            _not_json(e, exc.body)
            if e["type"] == "json_invalid"
            else {"field": _field(e["loc"]), "message": message_of(e)}
            for e in exc.errors()
        ]
        detail = "; ".join(
            e["message"] if e["field"] == "body" else f"{e['field']}: {e['message']}"
            for e in errors
        )
        return problem(422, "Invalid request", detail, errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 405:  # RFC 9110: say which methods the resource has
            response = problem(405, "Method not allowed", f"{request.method} is not allowed here")
            response.headers["Allow"] = ", ".join(_allowed_methods(request))
            return response
        if exc.status_code == 400:  # FastAPI's "error parsing the body": bytes that are not JSON
            detail = "the request body is not valid UTF-8 JSON"
            return problem(
                422, "Invalid request", detail, errors=[{"field": "body", "message": detail}]
            )
        return problem(exc.status_code, "Request refused", str(exc.detail))

    @app.exception_handler(ForagerError)
    async def _forager(_: Request, exc: ForagerError) -> JSONResponse:
        if isinstance(exc, InvalidRequest):
            title = "Invalid URL" if isinstance(exc, InvalidURL) else "Invalid request"
            errors = [{"field": exc.field, "message": exc.message}]
            return problem(422, title, exc.message, errors=errors)
        if isinstance(exc, Unauthorized):
            response = problem(401, "Unauthorized", exc.message)
            response.headers["WWW-Authenticate"] = "Bearer"
            return response
        if isinstance(exc, Forbidden):
            return problem(403, "Forbidden", exc.message)
        if isinstance(exc, NotFound):
            return problem(404, "Not found", exc.message)
        if isinstance(exc, LifecycleConflict):
            return problem(409, "Not allowed now", exc.message, current_status=exc.current_status)
        if isinstance(exc, Conflict):
            return problem(409, "Not allowed now", exc.message)
        log.error("unhandled Forager error: %s", exc.message)
        return problem(500, "Internal error", exc.message)

    @app.exception_handler(DataError)
    async def _data(_: Request, exc: DataError) -> JSONResponse:
        # A value the schema let through but the column cannot hold (range, encoding).
        log.warning("database refused a value: %s", type(exc.orig).__name__)
        detail = "a value is out of range or not storable for its field"
        return problem(
            422, "Invalid request", detail, errors=[{"field": "body", "message": detail}]
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return problem(500, "Internal error", "an unexpected error happened; see the server log")
