"""``/api/alerts`` (issue 17): a webhook's secret is shown once and stored encrypted, targets are
masked, bad rules are refused naming the field, deliveries are listed with their tries and
can be re-sent."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import insert, select, text

from forager.db.models import AlertDelivery, AlertRule, Event
from forager.db.types import utcnow

HOOK = "https://hooks.example.com/forager/T0KEN-in-path?sig=abc123"


async def test_rules_secrets_and_deliveries_through_the_api(api: httpx.AsyncClient) -> None:
    created = await api.post(
        "/api/alerts/rules",
        json={"name": "cheap", "kind": "price_below", "threshold": "80.00", "webhook_url": HOOK,
              "min_change_abs": "0.05"},
    )  # fmt: skip
    assert created.status_code == 201, created.text
    rule = created.json()
    secret = rule["secret"]
    assert len(secret) >= 40 and rule["signed"] is True
    assert rule["target"] == "https://hooks.example.com/…" and rule["threshold"] == "80.00"

    ported = await api.post(
        "/api/alerts/rules",
        json={"name": "two", "kind": "task_failed",
              "webhook_url": "https://hooks.example.com:8443/other/T0KEN?sig=x"},
    )  # fmt: skip
    assert ported.json()["target"] == "https://hooks.example.com:8443/…"  # the port tells apart
    await api.delete(f"/api/alerts/rules/{ported.json()['id']}")

    listed = await api.get("/api/alerts/rules")
    fetched = await api.get(f"/api/alerts/rules/{rule['id']}")
    for answer in (listed, fetched):
        assert answer.status_code == 200
        assert secret not in answer.text and "T0KEN" not in answer.text
        assert "secret" not in answer.json().get("items", [answer.json()])[0]
    db = api.app.state.runtime.db  # type: ignore[attr-defined]
    async with db.reader() as session:
        stored = (await session.execute(select(AlertRule))).scalar_one()
        events = " ".join(str(e.details) for e in (await session.execute(select(Event))).scalars())
        raw = " ".join(
            str(v) for v in (await session.execute(text("SELECT * FROM alert_rules"))).one()
        )
    assert secret not in raw and "T0KEN" not in raw and "T0KEN" not in events
    assert stored.secret_enc is not None

    off = await api.patch(f"/api/alerts/rules/{rule['id']}", json={"enabled": False})
    assert off.status_code == 200 and off.json()["enabled"] is False

    async with db.session() as session:
        delivery_id = await session.scalar(
            insert(AlertDelivery).values(
                rule_id=rule["id"], event="price_below", subject_type="product", subject_id="1",
                payload={"event": "price_below"}, status="failed", attempts=3,
                next_attempt_at=utcnow(), created_at=utcnow(),
                last_error="the receiver answered 500",
            ).returning(AlertDelivery.id)
        )  # fmt: skip
    page = (await api.get("/api/alerts/deliveries", params={"status": "failed"})).json()
    assert [d["id"] for d in page["items"]] == [delivery_id] and page["total"] == 1
    detail = (await api.get(f"/api/alerts/deliveries/{delivery_id}")).json()
    assert detail["history"] == [] and detail["last_error"] == "the receiver answered 500"
    resent = await api.post(f"/api/alerts/deliveries/{delivery_id}/resend")
    assert resent.status_code == 200
    assert (resent.json()["status"], resent.json()["attempts"]) == ("pending", 0)

    assert (await api.delete(f"/api/alerts/rules/{rule['id']}")).status_code == 204
    assert (await api.get(f"/api/alerts/deliveries/{delivery_id}")).status_code == 404
    assert (await api.get(f"/api/alerts/rules/{rule['id']}")).status_code == 404


async def _refused(api: httpx.AsyncClient, body: dict[str, Any]) -> list[str]:
    answer = await api.post("/api/alerts/rules", json={"name": "r", **body})
    assert answer.status_code == 422, answer.text
    return [e["field"] for e in answer.json()["errors"]]


async def test_bad_rules_are_refused_naming_the_field(api: httpx.AsyncClient) -> None:
    hook = {"webhook_url": "https://hooks.example.com/x"}
    assert "threshold" in await _refused(api, {"kind": "price_below", **hook})
    assert "percent" in await _refused(api, {"kind": "price_below", "threshold": 5,
                                             "percent": 3, **hook})  # fmt: skip
    assert "domain_id" in await _refused(api, {"kind": "agent_blocked", "domain_id": 1, **hook})
    assert "apprise_url" in await _refused(api, {"kind": "task_failed",
                                                 "apprise_url": "nosuchservice://x/y"})  # fmt: skip
    assert "webhook_url" in await _refused(api, {"kind": "task_failed"})
    missing = await api.post(
        "/api/alerts/rules",
        json={"name": "r", "kind": "out_of_stock", "product_id": 424242, **hook},
    )
    assert missing.status_code == 404
    email = await api.post(
        "/api/alerts/rules",
        json={"name": "mail", "kind": "mission_failed",
              "apprise_url": "mailtos://me:app-pass-9@smtp.example.com?to=ops@example.com"},
    )  # fmt: skip
    assert email.status_code == 201, email.text
    assert email.json()["secret"] is None and "app-pass-9" not in email.text
