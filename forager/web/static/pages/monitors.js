// Live monitors (issue 15): each monitor's health, freshness, current interval, memory and
// last change; create, pause, resume, delete; a chart of a numeric field over its changes;
// the unresolved scraper errors, resolved by hand.
// Redrawn from the API every few seconds while the page is shown.

import {
  api, confirmAction, errorText, field, h, isAdmin, select, statusBadge, table, time, toast,
  lineChart,
} from "../lib.js";

const REFRESH_MS = 3000;

function ageText(seconds) {
  if (seconds === null || seconds === undefined) return "never";
  if (seconds < 120) return `${Math.round(seconds)} s ago`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min ago`;
  return `${Math.round(seconds / 3600)} h ago`;
}

// "name = selector" lines → {name: selector}
function selectorMap(text) {
  const map = {};
  for (const line of text.split("\n")) {
    const at = line.indexOf("=");
    if (at > 0) map[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return map;
}

function createForm(reload) {
  const url = h("input", { name: "url", type: "url", required: true, maxlength: 2047,
    placeholder: "https://example.com/live/123" });
  const name = h("input", { name: "name", maxlength: 100 });
  const fetcher = select("fetcher", [["http", "http"], ["impersonate", "impersonate"],
    ["browser", "browser"]], "http");
  const mode = select("mode", [["json_paths", "JSON paths"], ["css", "CSS selectors"],
    ["parser_name", "Parser"]], "json_paths");
  const spec = h("textarea", { name: "spec", rows: 3,
    placeholder: "home = score.home\naway = score.away   (or a parser name: generic)" });
  const interval = h("input", { name: "interval_seconds", type: "number", min: 0.05, max: 3600,
    step: "any", placeholder: "2.5" });
  return h("form", { class: "card", "aria-label": "New monitor", onsubmit: async (event) => {
    event.preventDefault();
    const body = { url: url.value.trim(), fetcher: fetcher.value };
    if (name.value.trim()) body.name = name.value.trim();
    if (interval.value) body.interval_seconds = Number(interval.value);
    if (mode.value === "parser_name") body.parser_name = spec.value.trim();
    else body[mode.value] = selectorMap(spec.value);
    try {
      const created = await api("POST", "/api/monitors", body);
      toast(`Monitor ${created.id} created`);
      event.target.reset();
      reload();
    } catch (error) { toast(errorText(error), "error"); }
  } },
  h("div", { class: "row" }, field("URL", url), field("Name", name), field("Fetcher", fetcher),
    field("Reads", mode), field("Interval (s)", interval)),
  field("Fields (name = selector, one a line) or parser", spec),
  h("button", { type: "submit", class: "primary" }, "Create monitor"));
}

function actions(monitor, reload) {
  if (!isAdmin()) return null;
  const run = (label, method, path, ask) => h("button", { type: "button", onclick: async () => {
    if (ask && !(await confirmAction(ask, `${label} monitor ${monitor.id}`, "Keep it"))) return;
    try {
      await api(method, path);
      toast(`${label}: monitor ${monitor.id}`);
      reload();
    } catch (error) { toast(errorText(error), "error"); }
  } }, label);
  return [
    monitor.enabled ? run("Pause", "POST", `/api/monitors/${monitor.id}/pause`)
      : run("Resume", "POST", `/api/monitors/${monitor.id}/resume`),
    run("Delete", "DELETE", `/api/monitors/${monitor.id}`,
      `Delete monitor ${monitor.id} and its history?`),
  ];
}

function rowOf(m, reload, chart) {
  return h("tr", { "data-monitor": m.id },
    h("td", {}, h("button", { type: "button", class: "link", onclick: () => chart(m) },
      m.name || `#${m.id}`), h("div", { class: "muted" }, m.url)),
    h("td", {}, statusBadge(m.status)),
    h("td", {}, h("span", { class: `status ${m.health_status}` }, m.health_status)),
    h("td", {}, ageText(m.data_age_seconds)),
    h("td", { class: "num" }, `${m.current_interval_seconds.toFixed(2)} s`),
    h("td", { class: "num" }, m.memory_mb === null ? "—" : `${m.memory_mb} MB`),
    h("td", {}, m.last_change_at ? time(m.last_change_at) : "—"),
    h("td", { class: "num" }, `${m.total_changes} / ${m.total_updates}`),
    h("td", { class: "num" }, String(m.consecutive_errors)),
    h("td", {}, m.breaker_state),
    h("td", {}, actions(m, reload)));
}

async function drawChart(box, monitor) {
  const history = await api("GET", `/api/monitors/${monitor.id}/history?limit=500`);
  const numeric = (value) => (value === null || value === "" || Number.isNaN(Number(value))
    ? null : Number(value));
  const first = history.length ? history[0].data : {};
  const key = Object.keys(first).find((k) => numeric(first[k]) !== null);
  box.replaceChildren(h("h2", {}, `${monitor.name || `Monitor ${monitor.id}`}: changes`));
  if (!key) {
    box.append(h("p", { class: "muted" }, history.length
      ? "No numeric field to chart; latest value:" : "No data yet."),
    history.length ? h("pre", {}, JSON.stringify(first, null, 2)) : null);
    return;
  }
  const points = history.map((s) => [new Date(s.observed_at), numeric(s.data[key])])
    .filter((p) => p[1] !== null).reverse();
  box.append(lineChart(points, `${key} over time`), h("p", { class: "muted" },
    `${key}: ${points.length} changes`));
}

function errorsView(page, reload) {
  if (!page.items.length) return h("p", { class: "muted" }, "No unresolved errors.");
  return table(["When", "Monitor", "Type", "Category", "Attempt", "Message", ""],
    page.items.map((e) => h("tr", { "data-error": e.id },
      h("td", {}, time(e.timestamp)), h("td", {}, `#${e.monitor_id}`),
      h("td", {}, e.error_type), h("td", {}, e.category),
      h("td", { class: "num" }, String(e.retry_attempt)),
      h("td", {}, (e.error_message || "").slice(0, 200)),
      h("td", {}, isAdmin() ? h("button", { type: "button", onclick: async () => {
        try {
          await api("POST", `/api/monitor-errors/${e.id}/resolve`);
          toast(`Error ${e.id} resolved`);
          reload();
        } catch (error) { toast(errorText(error), "error"); }
      } }, "Resolve") : null))), { class: "stack" });
}

export async function render(view, _arg, current) {
  const list = h("div", {});
  const errors = h("section", { class: "card", "aria-label": "Unresolved errors" });
  const chartBox = h("section", { class: "card", "aria-label": "Chart" });
  let chosen = null;
  const chart = (monitor) => { chosen = monitor; drawChart(chartBox, monitor).catch(
    (error) => chartBox.replaceChildren(h("p", { class: "alert" }, errorText(error)))); };
  const reload = async () => {
    try {
      const page = await api("GET", "/api/monitors?limit=200");
      if (!current()) return;
      list.replaceChildren(page.items.length ? table(["Monitor", "Status", "Health", "Fresh",
        "Interval", "Memory", "Last change", "Changes / polls", "Errors", "Breaker", ""],
      page.items.map((m) => rowOf(m, reload, chart)), { class: "stack" })
        : h("p", { class: "muted" }, "No monitors yet."));
      const unresolved = await api("GET", "/api/monitor-errors?resolved=false&limit=20");
      if (!current()) return;
      errors.replaceChildren(h("h2", {}, `Unresolved errors (${unresolved.total})`),
        errorsView(unresolved, reload));
      if (chosen) {
        const still = page.items.find((m) => m.id === chosen.id);
        if (still) chart(still);
      }
    } catch (error) {
      list.replaceChildren(h("p", { class: "alert", role: "alert" }, errorText(error)));
    }
  };
  view.append(h("h1", {}, "Monitors"));
  if (isAdmin()) view.append(createForm(reload));
  view.append(list, chartBox, errors);
  await reload();
  const timer = setInterval(() => { if (current()) reload(); else clearInterval(timer); },
    REFRESH_MS);
}
