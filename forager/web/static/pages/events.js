// Events: the audit log, filterable by entity and event type, newest first.

import {
  api, field, formValues, go, h, link, pager, params, query, select, table, time,
} from "../lib.js";
import { live } from "../live.js";

const ENTITY_TYPES = ["", "task", "domain", "proxy", "domain_proxy", "api_key", "product",
  "agent"];

function entityLink(e) {
  if (e.entity_type === "task") return link(`/tasks/${e.entity_id}`, `task ${e.entity_id}`);
  if (e.entity_type === "product") {
    return link(`/products/${e.entity_id}`, `product ${e.entity_id}`);
  }
  return `${e.entity_type} ${e.entity_id}`;
}

export async function render(view, _arg, current) {
  const p = params();
  const values = Object.fromEntries(["entity_type", "entity_id", "event"]
    .filter((k) => p.get(k)).map((k) => [k, p.get(k)]));
  const offset = Number(p.get("offset") || 0);
  const body = h("div", {});
  view.append(h("h1", {}, "Events"),
    h("form", { class: "filters", role: "search", "aria-label": "Filter events",
      onsubmit: (event) => {
        event.preventDefault();
        go(`/events${query(formValues(event.target))}`);
      } },
    field("Entity", select("entity_type", ENTITY_TYPES.map((t) => [t, t || "any"]),
      values.entity_type || "")),
    field("Entity id", h("input", { name: "entity_id", value: values.entity_id || "", size: 8 })),
    field("Event", h("input", { name: "event", value: values.event || "", size: 14,
      placeholder: "e.g. paused" })),
    h("button", { type: "submit", class: "primary" }, "Filter"),
    h("a", { href: "/events", "data-link": true }, "Clear")),
    body);
  let newest = 0;
  const load = async () => {
    const data = await api("GET", `/api/events${query({ ...values, limit: 50, offset })}`);
    if (!current()) return;
    newest = Math.max(newest, ...data.items.map((e) => e.id));
    body.replaceChildren(table(["When", "Entity", "Event", "Details"], data.items.map((e) =>
      h("tr", {}, h("td", {}, time(e.created_at)), h("td", {}, entityLink(e)),
        h("td", {}, e.event), h("td", { class: "url" },
          e.details ? JSON.stringify(e.details) : "")))),
    pager(data, (o) => go(`/events${query({ ...values, offset: o })}`)));
  };
  await load();
  let pending = null;
  live.on((snapshot) => {
    if (current() && offset === 0 && snapshot.last_event_id > newest && !pending) {
      pending = setTimeout(() => { pending = null; load(); }, 1000);
    }
  });
}
