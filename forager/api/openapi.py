"""The OpenAPI description as the API really behaves: problem+json errors, auth refusals, examples.

FastAPI documents validation errors as its own ``HTTPValidationError`` JSON, but every error
this API returns is ``application/problem+json`` (``forager.api.errors``). The document is
rewritten once, on first request, so that:

- every error response an operation can give (401 without a valid key, 403 for a read key on a
  change, 404, 409, 413 for a body over the limit, 422) is documented as a ``Problem``;
- every JSON request body and every JSON success response carries an ``example``. Examples
  are composed from the schemas themselves: a field's own ``examples``, else the value for its
  name in ``FIELD_EXAMPLES`` (one glossary, so the same field reads the same everywhere), else
  its default, else a value of its type within its bounds. A test validates every example
  against its schema, so the examples cannot drift from the models.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from forager.api.errors import PROBLEM
from forager.api.links import add_links

JSON = "application/json"
Schema = dict[str, Any]

EXAMPLE_TIME = "2026-11-26T09:30:00Z"

# One realistic value per field name, shared by every schema that has the field.
FIELD_EXAMPLES: dict[str, Any] = {
    "url": "https://www.amazon.com.br/dp/B0ABC12345",
    "input_url": "https://www.amazon.com.br/dp/B0ABC12345?ref=nav",
    "final_url": "https://www.amazon.com.br/dp/B0ABC12345",
    "urls": [
        "https://www.amazon.com.br/dp/B0ABC12345",
        "https://shop.example.com/p/espresso-maker-1299",
    ],
    "url_hash": "9f2c1e0b7a4d3c2b1a09f8e7d6c5b4a39f2c1e0b7a4d3c2b1a09f8e7d6c5b4a3",
    "content_hash": "5d41402abc4b2a76b9719d911017c5925d41402abc4b2a76b9719d911017c592",
    "status": "completed",
    "result": "created",
    "phase": "fetch",
    "outcome": "success",
    "event": "status_changed",
    "entity_type": "task",
    "error_type": None,
    "error_message": None,
    "error": None,
    "batch_name": "black-friday-2026",
    "created_by": "api",
    "worker_id": "serve-1f3a",
    "lease_owner": None,
    "html_path": "www.amazon.com.br/9f/9f2c1e0b7a4d.html.gz",
    "page_path": "www.amazon.com.br/9f/9f2c1e0b7a4d.html.gz",
    "parser_name": "amazon",
    "parser_version": "3",
    "domain_name": "www.amazon.com.br",
    "base_url": "https://www.amazon.com.br",
    "user_agent": "Forager/0.1 (+https://github.com/forager)",
    "robots_txt_url": "https://www.amazon.com.br/robots.txt",
    "robots_txt_content": (
        "User-agent: *\nDisallow: /gp/cart\nAllow: /gp/cart/view\n"
        "Sitemap: https://www.amazon.com.br/sitemap.xml\n"
    ),
    "robots_txt_sitemaps": ["https://www.amazon.com.br/sitemap.xml"],
    "product_name": "Cafeteira Espresso Oster 15 Bar",
    "description": "Cafeteira espresso com bomba de 15 bar e vaporizador de leite.",
    "price": "1299.90",
    "original_price": "1499.00",
    "currency": "BRL",
    "rating": "4.6",
    "review_count": 1287,
    "availability": "Em estoque",
    "is_available": True,
    "brand": "Oster",
    "category": "Cozinha > Cafeteiras",
    "sku": "BVSTEM6701",
    "gtin": "4006381333931",
    "mpn": "LX-2204-B",
    "asin": "B0ABC12345",
    "image_urls": ["https://m.media-amazon.com/images/I/61abcDEF12L._AC_SL1500_.jpg"],
    "image_url": "https://m.media-amazon.com/images/I/61abcDEF12L._AC_SL1500_.jpg",
    "image_type": "primary",
    "position": 0,
    "alt_text": None,
    "stored": True,
    "content_url": "/api/products/42/images/42/content",
    "content_type": "image/jpeg",
    "width": 1500,
    "height": 1500,
    "file_size": 183_402,
    "fetch_attempts": 1,
    "proxy_url": "proxy1.example.net",
    "proxy_host": "proxy1.example.net",
    "proxy_port": 8080,
    "proxy_protocol": "http",
    "proxy_username": "scraper",
    "proxy_password": "s3cret-pass",
    "password_set": True,
    "lines": "http://scraper:s3cret@proxy1.example.net:8080\nsocks5://proxy2.example.net:1080",
    "country_code": "BR",
    "kind": "serve",
    "id": 42,
    "task_id": 42,
    "task_ids": [42, 43],
    "domain_id": 7,
    "proxy_id": 3,
    "proxy_ids": [3, 4],
    "product_id": 42,
    "status_code": 200,
    "http_status_code": 200,
    "response_time_ms": 412,
    "avg_response_time_ms": 388,
    "bytes_received": 183_402,
    "crawl_frequency_seconds": 86_400,
    "default_crawl_frequency_seconds": 86_400,
    "max_retries": 3,
    "retry_count": 0,
    "recrawl_count": 0,
    "priority": 3,
    "is_active": True,
    "proxy_is_active": True,
    "city": "São Paulo",
    "provider": "residential-pool",
    "monthly_cost": "49.90",
    "max_requests_per_hour": 1000,
    "success_count": 1520,
    "failure_count": 12,
    "success_rate_percent": 99.2,
    "concurrency": 4,
    "in_flight": 2,
    "processed": 1834,
    "products": 100_234,
    "due_tasks": 120,
    "limit": 50,
    "offset": 0,
    "total": 1,
    "queue_depth": {"pending": 120, "crawling": 4, "completed": 98_310, "failed": 17},
    "tasks_by_status": {"pending": 120, "crawling": 4, "completed": 98_310, "failed": 17},
    "domains": {"true": 12, "false": 1},
    "proxies": {"true": 40, "false": 2},
    "fetches_last_hour": {"success": 2840, "error": 61},
    "errors_last_hour": {"timeout": 31, "rate_limited": 22, "captcha": 8},
}


def _resolve(schema: Schema, components: dict[str, Schema]) -> Schema:
    while "$ref" in schema:
        schema = components[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def example_of(schema: Schema, components: dict[str, Schema], name: str = "") -> Any:
    """A value that ``schema`` accepts, as realistic as the schema and glossary allow."""
    schema = _resolve(schema, components)
    for key in ("examples", "example"):
        if key in schema:
            value = schema[key]
            return value[0] if key == "examples" and isinstance(value, list) else value
    if name in FIELD_EXAMPLES and _fits(FIELD_EXAMPLES[name], schema, components):
        return FIELD_EXAMPLES[name]
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if schema.get("default") is not None:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        if key in schema and "properties" not in schema:  # else: constraints on an object
            variants = [v for v in schema[key] if _resolve(v, components).get("type") != "null"]
            return example_of(variants[0], components, name) if variants else None
    if "allOf" in schema:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(example_of(part, components, name))
        return merged
    return _typed_example(schema, components)


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _fits(value: Any, schema: Schema, components: dict[str, Schema]) -> bool:
    """Whether ``value`` has a type ``schema`` allows (a glossary entry must not lie)."""
    schema = _resolve(schema, components)
    if "anyOf" in schema or "oneOf" in schema:
        variants: list[Schema] = schema.get("anyOf") or schema.get("oneOf") or []
        return any(_fits(value, v, components) for v in variants)
    if "enum" in schema:
        return value in schema["enum"]
    kind = schema.get("type")
    if kind is None:
        return True
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False
    if not isinstance(value, _TYPES.get(kind, (object,))):
        return False
    if isinstance(value, int | float):
        return bool(schema.get("minimum", value) <= value <= schema.get("maximum", value))
    return not isinstance(value, str) or len(value) <= schema.get("maxLength", len(value))


def _typed_example(schema: Schema, components: dict[str, Schema]) -> Any:
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        return {
            prop: example_of(sub, components, prop)
            for prop, sub in schema.get("properties", {}).items()
        }
    if kind == "array":
        count = max(1, schema.get("minItems", 1))
        return [example_of(schema.get("items", {}), components) for _ in range(count)]
    if kind == "string":
        fmt = schema.get("format")
        if fmt == "date-time":
            return EXAMPLE_TIME
        if fmt == "date":
            return EXAMPLE_TIME[:10]
        return "x" * max(1, schema.get("minLength", 1)) if "minLength" in schema else "text"
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0) + 1)
        value = max(low, 1)
        if "maximum" in schema:
            value = min(value, schema["maximum"])
        return value
    if kind == "boolean":
        return False
    return None


def _problem(status: int, title: str, detail: str, **extra: Any) -> dict[str, Any]:
    example = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return {"schema": {"$ref": "#/components/schemas/Problem"}, "example": {**example, **extra}}


PROBLEM_SCHEMA: Schema = {
    "title": "Problem",
    "type": "object",
    "description": "An error, as RFC 9457 problem details.",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string", "description": "What went wrong, for a person to read."},
        "errors": {
            "type": "array",
            "description": "Validation errors: the field at fault and what is wrong with it.",
            "items": {
                "type": "object",
                "required": ["field", "message"],
                "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
            },
        },
        "current_status": {
            "type": "string",
            "description": "On a 409 lifecycle refusal: the task's status now.",
        },
    },
}

_STANDARD_ERRORS: dict[str, tuple[str, str]] = {
    "401": ("Unauthorized", "a valid API key is required: Authorization: Bearer fgr_…"),
    "403": ("Forbidden", "this API key has the read role and cannot change anything"),
    "404": ("Not found", "no task with id 42"),
    "409": ("Not allowed now", "cannot pause a task that is completed"),
    "413": ("Request too large", "the request body is over the 1048576-byte limit"),
    "422": ("Invalid request", "priority: Input should be less than or equal to 10"),
}


def _document_errors(path: str, method: str, op: dict[str, Any]) -> None:
    responses: dict[str, Any] = op.setdefault("responses", {})
    if path.startswith("/api"):
        responses.setdefault("401", {"description": "No API key, or not a valid one."})
        if method != "get":
            responses.setdefault("403", {"description": "A read key cannot change anything."})
    if "requestBody" in op:
        responses.setdefault("413", {"description": "The request body is over the size limit."})
    for code, response in responses.items():
        if code not in _STANDARD_ERRORS:
            continue
        title, detail = _STANDARD_ERRORS[code]
        extra: dict[str, Any] = {}
        if code == "422":
            extra["errors"] = [{"field": "priority", "message": detail.split(": ", 1)[1]}]
        if code == "409" and "current status" in response.get("description", ""):
            extra["current_status"] = "completed"
        response["content"] = {PROBLEM: _problem(int(code), title, detail, **extra)}
        if response.get("description", "").startswith("Validation Error"):
            response["description"] = "A parameter or body field is invalid; `errors` names it."


def _add_examples(op: dict[str, Any], components: dict[str, Schema]) -> None:
    body = op.get("requestBody", {}).get("content", {}).get(JSON)
    if body is not None and "example" not in body:
        body["example"] = example_of(body["schema"], components)
    for code, response in op.get("responses", {}).items():
        media = response.get("content", {}).get(JSON)
        if code.startswith("2") and media is not None and "schema" in media:
            media.setdefault("example", example_of(media["schema"], components))


NO_NUL = "^[^\\x00]*$"  # forager.api.limits refuses NUL in every field


def _forbid_nul(schema: Schema, components: dict[str, Schema], seen: set[str]) -> None:
    """Give every free-text string an input can carry the pattern that says NUL is refused."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        if name not in seen:
            seen.add(name)
            _forbid_nul(components[name], components, seen)
        return
    shaped = any(k in schema for k in ("pattern", "enum", "const"))
    free = not shaped and schema.get("format") not in ("date-time", "date", "time")
    if schema.get("type") == "string" and free:
        schema["pattern"] = NO_NUL
    for key in ("anyOf", "oneOf", "allOf"):
        for part in schema.get(key, []):
            _forbid_nul(part, components, seen)
    items = [schema["items"]] if isinstance(schema.get("items"), dict) else []
    for part in (*schema.get("properties", {}).values(), *items):
        _forbid_nul(part, components, seen)


def _inputs(op: dict[str, Any]) -> list[Schema]:
    body = op.get("requestBody", {}).get("content", {}).get(JSON, {}).get("schema")
    return [
        *(p["schema"] for p in op.get("parameters", []) if "schema" in p),
        *filter(None, [body]),
    ]


def describe(app: FastAPI) -> dict[str, Any]:
    """The rewritten OpenAPI document (built once, then cached on the app)."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    spec = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    components: dict[str, Schema] = spec.setdefault("components", {}).setdefault("schemas", {})
    components["Problem"] = PROBLEM_SCHEMA
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            if not path.startswith("/api") and op.get("security"):
                # Open routes that show more to a known caller (/health): the key is optional.
                op["security"] = [{}, *op["security"]]
            _document_errors(path, method, op)
            _add_examples(op, components)
    seen: set[str] = set()
    for operations in spec["paths"].values():
        for op in operations.values():
            for schema in _inputs(op):
                _forbid_nul(schema, components, seen)
    add_links(spec)
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    app.openapi_schema = spec
    return spec


def install(app: FastAPI) -> None:
    builder: Callable[[], dict[str, Any]] = lambda: describe(app)  # noqa: E731
    app.openapi = builder  # type: ignore[method-assign]
