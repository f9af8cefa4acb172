// Live monitors (issue 15): each monitor's health, freshness, current interval and last
// change, the memory of the processes that run them; create, pause, resume, delete; a chart of
// a numeric field over its changes and what changed at each (a diff); the unresolved scraper
// errors, resolved by hand.
// Redrawn from the API every few seconds while the page is shown.

import {
  api, confirmAction, errorText, field, h, isAdmin, plural, select, statusBadge, table, time,
  toast, lineChart,
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
    h("td", {}, m.last_change_at ? time(m.last_change_at) : "—"),
    h("td", { class: "num" }, `${m.total_changes} / ${m.total_updates}`),
    h("td", { class: "num" }, String(m.consecutive_errors)),
    h("td", {}, m.breaker_state),
    h("td", {}, actions(m, reload)));
}

// A number read from a value: 194.05, "194.05", "194.05 EUR", "R$ 1.234,56", "1,234.56",
// "-3.5 °C"; null when the value is not one number with at most a short unit or currency
// around it (a URL or a sentence with digits is not a number).
export function numeric(value) {
  if (typeof value === "number") return Number.isFinite(value) ? value : null;
  if (typeof value !== "string") return null;
  const match = /^([^\d-]{0,4}?)\s*(-?\d[\d.,\s\u00a0]*?)\s*[^\d]{0,4}$/.exec(value.trim());
  // A word glued to the number ("SKU-93", "EUR10") names a code, not an amount.
  if (!match || /\p{L}$/u.test(match[1])) return null;
  let text = match[2].replace(/[\s\u00a0]/g, "").replace(/[.,]$/, "");
  const [dot, comma] = [text.lastIndexOf("."), text.lastIndexOf(",")];
  if (dot >= 0 && comma >= 0) { // the last separator is the decimal one
    text = dot > comma ? text.replace(/,/g, "") : text.replace(/\./g, "").replace(",", ".");
  } else if (comma >= 0) { // "1,234" and "1,234,567" are thousands, "12,5" a decimal
    text = /^-?\d{1,3}(,\d{3})+$/.test(text) ? text.replace(/,/g, "") : text.replace(",", ".");
  } else if ((text.match(/\./g) || []).length > 1) {
    text = text.replace(/\./g, ""); // "1.234.567"
  }
  const number = Number(text);
  return Number.isFinite(number) ? number : null;
}

function shown(value) {
  if (value === null || value === undefined) return "—";
  return typeof value === "string" ? value : JSON.stringify(value);
}

// What changed at each snapshot (newest first), as the API words it: field, before → after.
function diffTable(history) {
  if (!history.length) return null;
  const change = (c) => {
    if (c.kind === "added") return h("ins", {}, shown(c.after));
    if (c.kind === "removed") return h("del", {}, shown(c.before));
    return [h("del", {}, shown(c.before)), " → ", h("ins", {}, shown(c.after))];
  };
  const changes = (s) => ((s.changes || []).length
    ? h("ul", { class: "diff" }, s.changes.map((c) => h("li",
      { "data-field": c.field, "data-kind": c.kind }, h("b", {}, c.field), ": ", change(c))))
    : h("span", { class: "muted" }, "no change"));
  return table(["Seen", "What changed"], history.map((s) => h("tr", { "data-snapshot": s.id },
    h("td", {}, time(s.observed_at)), h("td", {}, changes(s)))), { "aria-label": "Changes" });
}

async function drawChart(box, monitor) {
  const history = await api("GET", `/api/monitors/${monitor.id}/history?limit=500`);
  const first = history.length ? history[0].data : {};
  const key = Object.keys(first).find((k) => numeric(first[k]) !== null);
  box.replaceChildren(h("h2", {}, `${monitor.name || `Monitor ${monitor.id}`}: changes`));
  if (!key) {
    box.append(h("p", { class: "muted" }, history.length
      ? "No numeric field to chart; latest value:" : "No data yet."),
    history.length ? h("pre", {}, JSON.stringify(first, null, 2)) : null, diffTable(history));
    return;
  }
  const points = history.map((s) => [new Date(s.observed_at), numeric(s.data[key])])
    .filter((p) => p[1] !== null).reverse();
  box.append(points.length >= 2 ? lineChart(points, `${key} over time`)
    : h("p", { "data-testid": "single-value" }, `${key}: ${shown(first[key])} (one value so far)`),
  h("p", { class: "muted" }, `${key}: ${plural(points.length, "value")} seen, `
    + `${plural(Math.max(0, points.length - 1), "change")}`),
  diffTable(history));
}

// Monitors share the memory of the process that runs them: one figure per process.
function processesView(monitors) {
  const processes = new Map();
  for (const m of monitors) {
    if (!m.process || m.memory_mb === null) continue;
    const seen = processes.get(m.process) || { memory: m.memory_mb, count: 0 };
    seen.count += 1;
    processes.set(m.process, seen);
  }
  if (!processes.size) return null;
  return h("p", { class: "muted", "data-testid": "monitor-processes" },
    "Memory of the processes running monitors (shared by their monitors): ",
    [...processes].map(([name, p]) => `${name}: ${p.memory} MB for `
      + `${plural(p.count, "monitor")}`).join("; "));
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
      list.replaceChildren(...(page.items.length ? [table(["Monitor", "Status", "Health",
        "Fresh", "Interval", "Last change", "Changes / polls", "Errors", "Breaker", ""],
      page.items.map((m) => rowOf(m, reload, chart)), { class: "stack" }),
      processesView(page.items)].filter(Boolean)
        : [h("p", { class: "muted" }, "No monitors yet.")]));
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
