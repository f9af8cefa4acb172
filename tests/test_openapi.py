"""The OpenAPI document: stable operation ids, an example on every body, every error documented."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

from forager.api.openapi import example_of
from forager.app import create_app
from forager.config import Settings

PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data_dir: Path = tmp_path_factory.mktemp("openapi")
    return create_app(Settings(data_dir=data_dir)).openapi()


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, op)
        for path, operations in spec["paths"].items()
        for method, op in operations.items()
    ]


def _validate(spec: dict[str, Any], schema: dict[str, Any], value: Any, where: str) -> None:
    # The example's schema inside the whole document, so "#/components/..." references resolve.
    document = {"components": spec["components"], **schema}
    validator = jsonschema_rs.Draft202012Validator(document)
    errors = [str(e) for e in validator.iter_errors(value)]
    assert not errors, f"{where}: example does not fit its schema: {errors[:3]}"


def test_operation_ids_are_unique_snake_case_names(spec: dict[str, Any]) -> None:
    ids = [op["operationId"] for _, _, op in _operations(spec)]
    assert len(ids) == len(set(ids))
    for op_id in ids:
        assert op_id.replace("_", "").isalnum() and op_id == op_id.lower(), op_id
    # Ids are part of the contract for generated clients: a few that must not move.
    for stable in ("submit_task", "list_tasks", "pause_task", "list_products", "health"):
        assert stable in ids, stable


def test_every_json_body_and_success_response_has_a_valid_example(spec: dict[str, Any]) -> None:
    checked = 0
    for path, method, op in _operations(spec):
        where = f"{method.upper()} {path}"
        body = op.get("requestBody", {}).get("content", {}).get("application/json")
        if body is not None:
            assert "example" in body, f"{where}: request body has no example"
            _validate(spec, body["schema"], body["example"], f"{where} request")
            checked += 1
        for code, response in op["responses"].items():
            media = response.get("content", {}).get("application/json")
            if code.startswith("2") and media is not None and media.get("schema"):
                assert "example" in media, f"{where} {code}: no example"
                _validate(spec, media["schema"], media["example"], f"{where} {code}")
                checked += 1
    assert checked >= 40


def test_every_error_is_documented_as_problem_json(spec: dict[str, Any]) -> None:
    for path, method, op in _operations(spec):
        where = f"{method.upper()} {path}"
        responses = op["responses"]
        if path.startswith("/api"):
            assert "401" in responses, f"{where}: 401 not documented"
            if method != "get":
                assert "403" in responses, f"{where}: 403 not documented"
        if "requestBody" in op:
            assert "413" in responses, f"{where}: 413 not documented"
        for code, response in responses.items():
            if code.startswith(("4", "5")) and code != "503":
                content = response.get("content", {})
                assert list(content) == [PROBLEM], f"{where} {code}: {list(content)}"
                _validate(spec, content[PROBLEM]["schema"], content[PROBLEM]["example"], where)
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def test_lifecycle_refusals_document_the_current_status(spec: dict[str, Any]) -> None:
    refusal = spec["paths"]["/api/tasks/{task_id}/pause"]["post"]["responses"]["409"]
    assert refusal["content"][PROBLEM]["example"]["current_status"] == "completed"


def test_examples_follow_the_glossary_and_the_bounds() -> None:
    # The glossary's limit (50) and offset (0) lie outside these bounds, so they are not used.
    components: dict[str, Any] = {
        "Thing": {
            "type": "object",
            "properties": {
                "price": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "priority": {"type": "integer", "minimum": 1, "maximum": 10, "default": 5},
                "limit": {"type": "integer", "minimum": 1, "maximum": 10},
                "offset": {"type": "integer", "minimum": 20},
                "when": {"type": "string", "format": "date-time"},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                "kind": {"enum": ["a", "b"]},
            },
        }
    }
    example = example_of({"$ref": "#/components/schemas/Thing"}, components)
    assert example == {
        "price": "1299.90",
        "priority": 3,
        "limit": 1,
        "offset": 20,
        "when": "2026-11-26T09:30:00Z",
        "tags": ["text", "text"],
        "kind": "a",
    }


def test_health_declares_its_503_with_the_same_body(spec: dict[str, Any]) -> None:
    responses = spec["paths"]["/health"]["get"]["responses"]
    for status in ("200", "503"):
        schema = responses[status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/Health"}, status
    assert "down" in responses["503"]["description"]
