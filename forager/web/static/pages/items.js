// Items (ads, listings, snapshots: records that are not products): search and filters (in the
// URL), export of the current filter; an item's page with its data and versions, each version
// with the fields it changed.

import {
  api, exportLinks, field, formValues, go, h, link, outLink, pager, params, query, table, time,
} from "../lib.js";

const FILTERS = ["q", "kind", "domain", "changed_since"];
const SUMMARY_FIELDS = 3;

function shown(value) {
  if (value === null || value === undefined) return "—";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function summary(data) {
  return Object.entries(data).slice(0, SUMMARY_FIELDS)
    .map(([k, v]) => `${k}: ${shown(v)}`).join(" · ");
}

export async function render(view, _arg, current) {
  const p = params();
  const values = Object.fromEntries(FILTERS.filter((k) => p.get(k)).map((k) => [k, p.get(k)]));
  const offset = Number(p.get("offset") || 0);
  const input = (name, label, attrs) => field(label, h("input", { name,
    value: values[name] || "", ...(attrs || {}) }));
  view.append(h("h1", {}, "Items"),
    h("p", { class: "muted" }, "Records that are not products — ads, listings — read by parsers ",
      "and selector maps; each keeps its versions (docs/PARSERS.md, Items)."),
    h("form", { class: "filters", role: "search", "aria-label": "Search items",
      onsubmit: (event) => {
        event.preventDefault();
        go(`/items${query(formValues(event.target))}`);
      } },
    input("q", "Search", { type: "search", size: 24 }),
    input("kind", "Kind", { size: 10 }),
    input("domain", "Domain", { size: 12 }),
    h("button", { type: "submit", class: "primary" }, "Search"),
    h("a", { href: "/items", "data-link": true }, "Clear")),
    exportLinks("/api/items", values));
  const data = await api("GET", `/api/items${query({ ...values, limit: 50, offset })}`);
  if (!current()) return;
  view.append(table(["Item", "Kind", "Data", "Version", "Changed", "Last seen"],
    data.items.map((x) => h("tr", { "data-item-id": x.id },
      h("td", {}, link(`/items/${x.id}`, x.key)),
      h("td", {}, x.kind),
      h("td", {}, summary(x.data)),
      h("td", { class: "num" }, `v${x.version}`),
      h("td", {}, time(x.changed_at)),
      h("td", {}, time(x.last_seen_at)))), { "aria-label": "Items" }),
  pager(data, (o) => go(`/items${query({ ...values, offset: o })}`)));
}

function changeText(changes) {
  if (!changes) return "first seen";
  const parts = [];
  if (changes.changed.length) parts.push(`changed: ${changes.changed.join(", ")}`);
  if (changes.added.length) parts.push(`added: ${changes.added.join(", ")}`);
  if (changes.removed.length) parts.push(`removed: ${changes.removed.join(", ")}`);
  return parts.join("; ") || "—";
}

export async function renderOne(view, id) {
  const x = await api("GET", `/api/items/${id}`);
  document.title = `${x.kind} ${x.key} · Forager`;
  view.append(h("p", {}, link("/items", "← Items")),
    h("h1", {}, `${x.kind}: ${x.key}`),
    h("dl", { class: "facts card" }, ...[
      ["Version", `v${x.version}`],
      ["Read from", x.url ? outLink(x.url) : "—"],
      ["Task", x.crawl_task_id ? link(`/tasks/${x.crawl_task_id}`, `#${x.crawl_task_id}`) : "—"],
      ["Parser", `${x.parser_name} ${x.parser_version}`],
      ["First seen", time(x.first_seen_at)],
      ["Last seen", time(x.last_seen_at)],
      ["Changed", time(x.changed_at)],
    ].flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    h("h2", {}, "Data"),
    table(["Field", "Value"], Object.entries(x.data).map(([k, v]) =>
      h("tr", { "data-field": k }, h("td", {}, k), h("td", {}, shown(v)))), { "aria-label": "Data" }),
    h("h2", {}, `Versions (${x.versions_total})`),
    table(["Version", "Recorded", "What changed", "Changed values"], x.versions.map((v) => {
      const moved = v.changes ? [...v.changes.changed, ...v.changes.added] : [];
      return h("tr", { "data-version": v.version },
        h("td", {}, `v${v.version}`), h("td", {}, time(v.recorded_at)),
        h("td", {}, changeText(v.changes)),
        h("td", {}, moved.map((k) => `${k}: ${shown(v.data[k])}`).join(" · ")));
    }), { "aria-label": "Versions" }));
}
