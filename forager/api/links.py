"""OpenAPI links: how the id a response returns feeds the operations on that resource.

They tell a client (and a stateful API fuzzer) that ``POST /api/tasks`` answers with the id
``/api/tasks/{task_id}/pause`` takes, and so on. One table, written once, added by
``forager.api.openapi.describe``.
"""

from __future__ import annotations

from typing import Any

TASK_OPS = (
    "get_task",
    "list_task_attempts",
    "list_task_events",
    "pause_task",
    "resume_task",
    "cancel_task",
    "restart_task",
    "restart_task_parsing",
    "set_task_priority",
)
DOMAIN_OPS = (
    "get_domain",
    "update_domain",
    "delete_domain",
    "activate_domain",
    "deactivate_domain",
    "get_domain_stats",
    "assign_proxies",
    "list_domain_proxies",
)
PROXY_OPS = ("get_proxy", "update_proxy", "delete_proxy", "enable_proxy", "disable_proxy")
MAPPING_OPS = ("remove_proxy_mapping", "enable_proxy_mapping", "disable_proxy_mapping")
AGENT_OPS = ("get_agent", "revoke_agent", "rotate_agent_token", "reset_agent")
PRODUCT_OPS = ("get_product", "list_price_history")
ITEM_OPS = ("get_item", "list_item_versions")

# (source operation, its status codes, target operations, {target parameter: expression}).
LINKS: tuple[tuple[str, tuple[str, ...], tuple[str, ...], dict[str, str]], ...] = (
    ("submit_task", ("200", "201"), TASK_OPS, {"task_id": "$response.body#/task/id"}),
    ("list_tasks", ("200",), TASK_OPS, {"task_id": "$response.body#/items/0/id"}),
    ("submit_tasks", ("200",), TASK_OPS, {"task_id": "$response.body#/results/0/task_id"}),
    ("create_domain", ("201",), DOMAIN_OPS, {"domain_id": "$response.body#/id"}),
    ("list_domains", ("200",), DOMAIN_OPS, {"domain_id": "$response.body#/items/0/id"}),
    ("create_proxy", ("201",), PROXY_OPS, {"proxy_id": "$response.body#/id"}),
    ("list_proxies", ("200",), PROXY_OPS, {"proxy_id": "$response.body#/items/0/id"}),
    (
        "assign_proxies",
        ("200",),
        MAPPING_OPS,
        {"domain_id": "$request.path.domain_id", "proxy_id": "$response.body#/assigned/0"},
    ),
    ("create_agent", ("201",), AGENT_OPS, {"agent_id": "$response.body#/id"}),
    ("list_agents", ("200",), AGENT_OPS, {"agent_id": "$response.body#/items/0/id"}),
    ("list_products", ("200",), PRODUCT_OPS, {"product_id": "$response.body#/items/0/id"}),
    ("list_items", ("200",), ITEM_OPS, {"item_id": "$response.body#/items/0/id"}),
)


def add_links(spec: dict[str, Any]) -> None:
    """Write ``LINKS`` into the responses of ``spec`` (operations absent from it are skipped)."""
    operations = {
        op["operationId"]: op for methods in spec["paths"].values() for op in methods.values()
    }
    for source, statuses, targets, parameters in LINKS:
        if source not in operations:
            continue
        for status in statuses:
            response = operations[source]["responses"].get(status)
            if response is None:
                continue
            links = response.setdefault("links", {})
            for target in targets:
                if target in operations:
                    links[target] = {"operationId": target, "parameters": dict(parameters)}
