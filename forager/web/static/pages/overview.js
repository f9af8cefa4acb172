// Overview: queue depth and progress (why tasks wait), pages per minute, errors, workers (and
// agents), breakers, alerts (the alert rules' deliveries and the crawl's health warnings).

import { barChart, h, link, plural, session, statusBadge, table, time } from "../lib.js";
import { live } from "../live.js";
import { progressView } from "./progress.js";

const STATUSES = ["pending", "queued", "crawling", "downloaded", "queued_parse", "parsing",
  "completed", "failed", "paused", "cancelled"];

function minuteLabels() {
  const now = Date.now();
  return Array.from({ length: 60 }, (_, i) => {
    const at = new Date(now - (59 - i) * 60000);
    return at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  });
}

function countsView(byStatus) {
  const known = [...STATUSES, ...Object.keys(byStatus).filter((s) => !STATUSES.includes(s))];
  return h("div", { class: "counts" }, known.map((status) => h("a", {
    class: "count", href: `/tasks?status=${status}`, "data-link": true,
    "data-testid": `count-${status}`,
  }, h("b", {}, String(byStatus[status] || 0)), status)));
}

function errorsView(snapshot) {
  const fetches = Object.values(snapshot.fetches_last_hour || {}).reduce((a, b) => a + b, 0);
  const rows = Object.entries(snapshot.errors_last_hour || {}).sort((a, b) => b[1] - a[1])
    .map(([type, n]) => h("tr", {}, h("td", {}, type), h("td", { class: "num" }, String(n)),
      h("td", { class: "num" }, fetches ? `${((100 * n) / fetches).toFixed(1)} %` : "—")));
  if (!rows.length) return h("p", { class: "muted" }, "No errors in the last hour.");
  return table(["Error type", "Attempts", "Of fetches"], rows);
}

// The deliveries the Alerts page lists (of the last day), then the crawl's health warnings.
function deliveriesView(snapshot) {
  const sent = snapshot.alert_deliveries || [];
  if (!sent.length) return [];
  const counts = Object.entries(snapshot.alert_deliveries_last_day || {})
    .map(([status, n]) => `${n} ${status}`).join(", ");
  const total = Object.values(snapshot.alert_deliveries_last_day || {})
    .reduce((a, b) => a + b, 0);
  return [
    h("p", {}, `${plural(total, "alert")} in the last 24 hours (${counts}) · `,
      link("/alerts", "all alerts")),
    table(["Rule", "Event", "About", "Status", "Queued"], sent.map((d) => h("tr", {},
      h("td", {}, d.rule), h("td", {}, d.event), h("td", {}, d.subject),
      h("td", {}, statusBadge(d.status)), h("td", {}, time(d.created_at))))),
  ];
}

function alertsView(snapshot) {
  const alerts = (snapshot.alerts || []).map((a) => h("p", { class: "alert" },
    `${a.domain_name}: ${a.message}`));
  const fetches = snapshot.fetches_last_hour || {};
  const total = Object.values(fetches).reduce((a, b) => a + b, 0);
  const bad = (fetches.failed || 0) + (fetches.retry || 0);
  if (total >= 10 && bad / total > 0.1) {
    alerts.unshift(h("p", { class: "alert" },
      `Fetch failure rate is ${((100 * bad) / total).toFixed(1)} % over the last hour (over 10 %).`));
  }
  const sent = deliveriesView(snapshot);
  if (!alerts.length && !sent.length) {
    return [h("p", { class: "muted" }, "No alerts in the last 24 hours.")];
  }
  return [...sent, ...alerts];
}

function workersView(workers) {
  if (!workers.length) return h("p", { class: "muted" }, "No worker seen recently.");
  return table(["Worker", "Kind", "In flight", "Processed", "Last seen"], workers.map((w) =>
    h("tr", {}, h("td", { class: "worker-id" }, w.id), h("td", {}, w.kind),
      h("td", { class: "num" }, `${w.in_flight} / ${w.concurrency}`),
      h("td", { class: "num" }, String(w.processed)), h("td", {}, time(w.last_seen_at)))));
}

function breakersView(breakers) {
  if (!breakers.length) return h("p", { class: "muted" }, "No open circuit breaker.");
  return h("ul", {}, breakers.map((b) => h("li", {}, `${b.domain}: ${b.state}`)));
}

function agentsView(agents) {
  if (!agents.length) return h("p", { class: "muted" }, "No agents.");
  return table(["Agent", "Status", "Last heartbeat"], agents.map((a) => h("tr", {},
    h("td", {}, a.name), h("td", {}, h("span", { class: `status ${a.status}` }, a.status)),
    h("td", {}, time(a.last_heartbeat_at)))));
}

export async function render(view, _arg, current) {
  const counts = h("section", { "aria-labelledby": "h-queue" });
  const chart = h("div", { class: "card" });
  const errors = h("div", {});
  const workers = h("div", {});
  const breakers = h("div", {});
  const alerts = h("div", { "data-testid": "alerts" });
  const agents = h("div", {});
  const progress = progressView(null);
  view.append(
    h("h1", {}, "Overview"),
    h("h2", { id: "h-queue" }, "Queue by status"), counts,
    h("h2", {}, "Progress"), progress.el,
    h("h2", {}, "Alerts"), alerts,
    h("div", { class: "grid" },
      h("section", {}, h("h2", {}, "Pages per minute (last hour)"), chart),
      h("section", {}, h("h2", {}, "Errors by type (last hour)"), errors)),
    h("div", { class: "grid" },
      h("section", { class: "wide" }, h("h2", {}, "Active workers"), workers),
      h("section", {}, h("h2", {}, "Open circuit breakers"), breakers),
      session.who.features.agents ? h("section", {}, h("h2", {}, link("/agents", "Agents")), agents)
        : null),
  );
  counts.append(h("p", { class: "muted" }, "Waiting for live data…"));
  const drawn = {};
  // Redraws a part only when its data changed, so keyboard focus is not lost every second.
  const draw = (name, target, data, make) => {
    const text = JSON.stringify(data);
    if (drawn[name] === text) return;
    drawn[name] = text;
    target.replaceChildren(...[make(data)].flat());
  };
  live.on((snapshot) => {
    if (!current()) return;
    draw("counts", counts, snapshot.tasks_by_status, countsView);
    if (session.who.features.agents) draw("agents", agents, snapshot.agents || [], agentsView);
    const perMinute = snapshot.pages_per_minute || [];
    const total = perMinute.reduce((a, b) => a + b, 0);
    chart.replaceChildren(barChart(perMinute, minuteLabels(), "Pages fetched per minute"),
      h("p", { class: "muted" }, `${total} pages in the last hour`));
    progress.refresh();
    const slow = { e: snapshot.errors_last_hour, f: snapshot.fetches_last_hour,
      a: snapshot.alerts, d: snapshot.alert_deliveries, n: snapshot.alert_deliveries_last_day };
    draw("errors", errors, slow, () => errorsView(snapshot));
    draw("alerts", alerts, slow, () => alertsView(snapshot));
    draw("workers", workers, snapshot.workers || [], workersView);
    draw("breakers", breakers, snapshot.open_breakers || [], breakersView);
  }, true);
  await progress.refresh(true);
}
