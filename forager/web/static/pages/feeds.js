// Feeds (issue 35, docs/FEEDS.md): scheduled exports of what changed — each feed's kind,
// format, destination, schedule and last run; one feed's run history (?feed=id); create, pause
// or resume, run now, delete (admins). Followed live: redrawn from the API every few seconds
// while the stream ticks, and only when something changed.

import {
  api, confirmAction, errorText, field, go, h, isAdmin, link, pager, params, plural, query,
  select, statusBadge, table, time, toast,
} from "../lib.js";
import { live } from "../live.js";

const LIMIT = 50;
const EVERY_MS = 3000;
const BUSY_MS = 1000;
const KINDS = [["products", "products"], ["items", "items"], ["price_changes", "price changes"]];
const FORMATS = [["jsonl", "JSON Lines"], ["csv", "CSV"], ["parquet", "Parquet"]];
const DESTINATIONS = [["directory", "directory (<data_dir>/feeds)"],
  ["store", "page store (feeds/)"]];

function every(seconds) {
  if (seconds % 86400 === 0) return plural(seconds / 86400, "day");
  if (seconds % 3600 === 0) return plural(seconds / 3600, "hour");
  return seconds % 60 === 0 ? `${seconds / 60} min` : `${seconds} s`;
}

function filters(feed) {
  const parts = [["domain", feed.domain], ["batch", feed.batch_name], ["tag", feed.tag],
    ["item kind", feed.item_kind]].filter(([, v]) => v).map(([k, v]) => `${k} ${v}`);
  return parts.length ? parts.join(", ") : "every row";
}

function destination(feed) {
  const root = feed.destination === "directory" ? "<data_dir>/feeds" : "store: feeds";
  return feed.path ? `${root}/${feed.path}` : root;
}

// The feed's state: running (a process holds its lease), paused, or waiting for its turn.
function state(feed) {
  const name = feed.lease_owner ? "running" : feed.enabled ? "active" : "paused";
  return h("span", { class: `status ${name}`, "data-state": name }, name);
}

function lastRun(run) {
  if (!run) return h("span", { class: "muted" }, "not yet");
  return h("span", { "data-testid": "last-run" }, statusBadge(run.status), " ",
    time(run.finished_at || run.started_at),
    run.rows === null ? "" : ` · ${plural(run.rows, "row")}`,
    run.error ? h("div", { class: "muted" }, run.error) : null);
}

function actions(feed, reload) {
  if (!isAdmin()) return null;
  const run = (label, method, path, body, ask) => h("button", { type: "button",
    class: ask ? "danger" : null, "aria-label": `${label} feed ${feed.name}`,
    onclick: async () => {
      if (ask && !(await confirmAction(ask, `Delete feed ${feed.name}`, "Keep it"))) return;
      try {
        await api(method, path, body);
        toast(`${feed.name}: ${label.toLowerCase()}`);
        if (method === "DELETE" && Number(params().get("feed")) === feed.id) go("/feeds", true);
        else reload();
      } catch (error) { toast(errorText(error), "error"); }
    } }, label);
  return [
    run("Run now", "POST", `/api/feeds/${feed.id}/run`),
    feed.enabled ? run("Pause", "PATCH", `/api/feeds/${feed.id}`, { enabled: false })
      : run("Resume", "PATCH", `/api/feeds/${feed.id}`, { enabled: true }),
    run("Delete", "DELETE", `/api/feeds/${feed.id}`, undefined,
      `Delete feed ${feed.name} and its runs' history? The files it wrote stay.`),
  ];
}

function feedRow(feed, last, reload) {
  return h("tr", { "data-feed": feed.id },
    h("td", {}, link(`/feeds${query({ feed: feed.id })}`, feed.name)),
    h("td", {}, state(feed)),
    h("td", {}, feed.kind.replace("_", " "), h("div", { class: "muted" }, filters(feed))),
    h("td", {}, feed.format),
    h("td", {}, h("span", { class: "url" }, destination(feed))),
    h("td", {}, `every ${every(feed.interval_seconds)}`,
      h("div", { class: "muted" }, "next ", time(feed.next_run_at))),
    h("td", { "data-cell": "last-run" }, lastRun(last)),
    h("td", {}, actions(feed, reload)));
}

function bytes(n) {
  if (n === null) return "—";
  return n < 1024 ? `${n} B` : n < 1048576 ? `${(n / 1024).toFixed(1)} KB`
    : `${(n / 1048576).toFixed(1)} MB`;
}

function runsTable(runs) {
  if (!runs.items.length) {
    return h("p", { class: "muted", "data-testid": "no-runs" }, "No run yet: a new feed runs at "
      + "once, on the next pass of the scheduler (in forager serve or a worker).");
  }
  return table(["Run", "Status", "Started", "Finished", "Changes", "Rows", "Size", "File",
    "Tries", "Error"], runs.items.map((r) => h("tr", { "data-run": r.id },
    h("td", { class: "num" }, `#${r.id}`),
    h("td", { "data-cell": "status" }, statusBadge(r.status)),
    h("td", {}, time(r.started_at)), h("td", {}, time(r.finished_at)),
    h("td", { class: "num", title: "change numbers (from, to]" }, `${r.from_seq} → ${r.to_seq}`),
    h("td", { class: "num", "data-cell": "rows" }, r.rows === null ? "—" : String(r.rows)),
    h("td", { class: "num" }, bytes(r.bytes)),
    h("td", {}, r.file ? h("span", { class: "url" }, r.file)
      : h("span", { class: "muted" }, "none (nothing new)")),
    h("td", { class: "num" }, String(r.attempts)),
    h("td", { "data-cell": "error" }, r.error || ""))),
  { class: "stack", "aria-label": "Runs" });
}

function createForm() {
  const text = (name, attrs) => h("input", { name, ...(attrs || {}) });
  const inputs = {
    name: text("name", { required: true, maxlength: 100, size: 20 }),
    kind: select("kind", KINDS, "products"),
    format: select("format", FORMATS, "jsonl"),
    destination: select("destination", DESTINATIONS, "directory"),
    path: text("path", { maxlength: 200, size: 18, placeholder: "daily/kettles" }),
    interval_seconds: text("interval_seconds", { type: "number", min: 60, value: 3600,
      class: "short" }),
    domain: text("domain", { maxlength: 255, size: 14 }),
    batch_name: text("batch_name", { maxlength: 255, size: 12 }),
    tag: text("tag", { maxlength: 50, size: 10 }),
    item_kind: text("item_kind", { maxlength: 50, size: 10 }),
    enabled: h("input", { type: "checkbox", name: "enabled", checked: true }),
  };
  const message = h("p", { role: "alert", class: "muted", "data-testid": "feed-error" });
  return h("form", { class: "card", "aria-label": "New feed", onsubmit: async (event) => {
    event.preventDefault();
    message.textContent = "";
    const body = { name: inputs.name.value.trim(), kind: inputs.kind.value,
      format: inputs.format.value, destination: inputs.destination.value,
      path: inputs.path.value.trim(), interval_seconds: Number(inputs.interval_seconds.value),
      enabled: inputs.enabled.checked };
    for (const key of ["domain", "batch_name", "tag", "item_kind"]) {
      if (inputs[key].value.trim()) body[key] = inputs[key].value.trim();
    }
    try {
      const feed = await api("POST", "/api/feeds", body);
      toast(`Feed ${feed.name} created`);
      go(`/feeds${query({ feed: feed.id })}`);
    } catch (error) { message.textContent = errorText(error); }
  } },
  h("h2", {}, "New feed"),
  h("div", { class: "row" }, field("Name", inputs.name), field("Exports", inputs.kind),
    field("Format", inputs.format), field("Destination", inputs.destination),
    field("Folder", inputs.path), field("Every (s)", inputs.interval_seconds)),
  h("div", { class: "row" }, field("Only domain", inputs.domain),
    field("Only batch", inputs.batch_name), field("Only tag", inputs.tag),
    field("Only item kind", inputs.item_kind),
    h("label", { class: "inline" }, inputs.enabled, "Enabled"),
    h("button", { type: "submit", class: "primary" }, "Create feed")),
  message);
}

export async function render(view, _arg, current) {
  const p = params();
  const offset = Number(p.get("offset")) || 0;
  const selected = Number(p.get("feed")) || null;
  const runsOffset = Number(p.get("runs_offset")) || 0;
  const list = h("div", {});
  const history = h("div", {});
  let loaded = 0;
  let shown = null;
  let busy = false;
  view.append(h("h1", {}, "Feeds"),
    h("p", { class: "muted" }, "A feed writes what changed since its last run (products, items "
      + "or price changes) to a file, on a schedule (docs/FEEDS.md)."),
    list, history, isAdmin() ? createForm() : null);
  const reload = async () => {
    loaded = Date.now();
    const page = await api("GET", `/api/feeds${query({ limit: LIMIT, offset })}`);
    // Each feed's newest run (few feeds: one small request each, as the Jobs page does).
    const lasts = await Promise.all(page.items.map((f) =>
      api("GET", `/api/feeds/${f.id}/runs?limit=1`)));
    const feed = selected ? page.items.find((f) => f.id === selected)
      || await api("GET", `/api/feeds/${selected}`) : null;
    const runs = feed
      ? await api("GET", `/api/feeds/${feed.id}/runs${query({ limit: LIMIT, offset: runsOffset })}`)
      : null;
    busy = page.items.some((f) => f.lease_owner
      || (f.enabled && Date.parse(f.next_run_at) <= Date.now()));
    const text = JSON.stringify([page, lasts, feed, runs]);
    if (!current() || text === shown) return; // redraw only on change: focus stays put
    shown = text;
    list.replaceChildren(page.items.length ? table(["Feed", "State", "Exports", "Format",
      "Destination", "Schedule", "Last run", ""], page.items.map((f, i) =>
      feedRow(f, lasts[i].items[0], refresh)), { class: "stack", "aria-label": "Feeds" })
      : h("p", { class: "muted" }, isAdmin() ? "No feed yet: create one below."
        : "No feed yet."),
    pager(page, (o) => go(`/feeds${query({ offset: o })}`)) || "");
    history.replaceChildren(...(feed ? [
      h("h2", {}, `Runs of ${feed.name}`),
      h("section", { "data-testid": "feed-runs", "data-feed": feed.id },
        h("p", { class: "muted" }, `${plural(runs.total, "run")}; exported up to change `,
          `${feed.cursor}; `, feed.enabled ? ["next run ", time(feed.next_run_at)] : "paused",
          feed.lease_owner ? ` · running in ${feed.lease_owner}` : ""),
        runsTable(runs),
        pager(runs, (o) => go(`/feeds${query({ feed: feed.id, runs_offset: o })}`)) || ""),
    ] : []));
  };
  const refresh = () => reload().catch((error) => {
    if (!current()) return;
    list.replaceChildren(h("p", { class: "alert", role: "alert" }, errorText(error)));
  });
  await reload();
  // A feed that is due or running (just made, or Run now) is followed every second.
  live.on(() => {
    if (current() && Date.now() - loaded >= (busy ? BUSY_MS : EVERY_MS)) refresh();
  });
}
