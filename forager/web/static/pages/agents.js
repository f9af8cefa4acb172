// Agents: shown only when the server has an /api/agents router. A generic table of what the
// agents API returns; actions belong to that API and are not wired here yet.

import { api, h, table, time } from "../lib.js";

const TIME_FIELDS = /(_at|heartbeat)$/;

export async function render(view) {
  view.append(h("h1", {}, "Agents"));
  const data = await api("GET", "/api/agents");
  const items = Array.isArray(data) ? data : data.items || [];
  if (!items.length) {
    view.append(h("p", { class: "muted" }, "No agents."));
    return;
  }
  const columns = Object.keys(items[0]).filter((k) => !/token|secret|hash/i.test(k)).slice(0, 10);
  view.append(table(columns, items.map((a) => h("tr", {}, columns.map((c) => h("td", {},
    TIME_FIELDS.test(c) && typeof a[c] === "string" ? time(a[c])
      : typeof a[c] === "object" && a[c] !== null ? JSON.stringify(a[c]) : String(a[c] ?? "")))))));
}
