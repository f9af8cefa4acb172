// Batches: every batch with its progress; one batch (?name=) live — counts by status, products,
// failures by error type, pace and estimated end, why its tasks wait — and its moves.

import { api, confirmAction, errorText, h, isAdmin, link, pager, params, plural, query, table,
  time, toast } from "../lib.js";
import { live } from "../live.js";
import { progressView } from "./progress.js";

const LIMIT = 50;
const EVERY_MS = 3000;

function figures(values) {
  const entries = Object.entries(values).sort();
  if (!entries.length) return h("span", { class: "muted" }, "none");
  return entries.map(([k, v]) => h("span", { class: "figure", "data-key": k }, `${k} ${v}`))
    .flatMap((el, i) => (i ? [" · ", el] : [el]));
}

function pace(b) {
  return b.pages_per_minute === null ? "none lately" : `${b.pages_per_minute} pages/min`;
}

function state(b) {
  return h("span", { class: `status ${b.state === "finished" ? "completed" : b.state}`,
    "data-state": b.state }, b.state);
}

function moves(b, after) {
  if (!isAdmin()) return null;
  const run = (label, path, body, ask) => h("button", { type: "button",
    class: ask ? "danger" : null, "data-move": path + (body ? `-${body.only}` : ""),
    onclick: async () => {
      if (ask && !(await confirmAction(ask, label, "Go back"))) return;
      try {
        const done = await api("POST", `/api/batches/${encodeURIComponent(b.name)}/${path}`,
          body);
        toast(`${label}: ${plural(done.moved, "task")} of ${b.name} → ${done.to}`);
        after();
      } catch (error) { toast(errorText(error), "error"); }
    } }, label);
  const paused = b.state === "paused";
  return h("div", { class: "row", "data-testid": "batch-moves" },
    paused ? run("Resume", "resume") : run("Pause", "pause"),
    run("Cancel batch", "cancel", undefined,
      `Cancel every unfinished task of ${b.name}? Workers drop those in flight.`),
    run("Restart failed", "restart", { only: "failed" }),
    run("Restart all", "restart", { only: "all" },
      `Crawl every finished task of ${b.name} again?`));
}

function detail(b, after) {
  return [
    h("p", { "data-testid": "batch-summary" }, state(b), " ",
      `${b.done} of ${b.total} done · ${b.paused} paused · ${b.remaining} to go · `,
      `${plural(b.products, "product")} · ${pace(b)}`),
    h("progress", { max: Math.max(b.total, 1), value: b.done, "aria-label": "Done" }),
    h("dl", { class: "facts" },
      h("dt", {}, "By status"), h("dd", { "data-testid": "batch-statuses" }, figures(b.by_status)),
      h("dt", {}, "Failures"), h("dd", { "data-testid": "batch-failures" }, figures(b.failures)),
      h("dt", {}, "Started"), h("dd", {}, time(b.started_at)),
      h("dt", {}, "Estimated end"), h("dd", {}, time(b.estimated_end))),
    moves(b, after),
    h("p", {}, link(`/tasks${query({ batch_name: b.name })}`, "Its tasks")),
  ];
}

async function one(view, name, current, reloadList) {
  const card = h("section", { class: "card progress", "data-testid": "batch", "data-batch": name },
    h("p", { class: "muted" }, "Loading…"));
  const waits = progressView(name);
  view.append(h("h2", {}, `Batch ${name}`), card, h("h2", {}, "Why its tasks wait"), waits.el);
  let last = 0;
  let shown = null;
  const refresh = async (force) => {
    if (!force && Date.now() - last < EVERY_MS) return;
    last = Date.now();
    try {
      const b = await api("GET", `/api/batches/${encodeURIComponent(name)}`);
      const text = JSON.stringify(b);
      if (!current() || text === shown) return; // redraw only on change: focus stays put
      shown = text;
      card.replaceChildren(...detail(b, () => {
        refresh(true);
        waits.refresh(true);
        reloadList();
      }));
    } catch (error) {
      card.replaceChildren(h("p", { class: "alert" }, errorText(error)));
    }
  };
  live.on(() => { if (current()) { refresh(); waits.refresh(); } });
  await Promise.all([refresh(true), waits.refresh(true)]);
}

export async function render(view, _arg, current) {
  const name = params().get("name");
  const list = h("div", {});
  let offset = 0;
  let loaded = 0;
  const load = async () => {
    loaded = Date.now();
    const data = await api("GET", `/api/batches${query({ limit: LIMIT, offset })}`);
    if (!current()) return;
    list.replaceChildren(...[data.items.length ? table(["Batch", "State", "Done", "Paused",
      "Products", "Failed", "Pace", "Started", "Estimated end"], data.items.map((b) =>
      h("tr", { "data-batch": b.name },
        h("td", {}, link(`/batches${query({ name: b.name })}`, b.name)),
        h("td", {}, state(b)),
        h("td", { class: "num" }, `${b.done} / ${b.total}`),
        h("td", { class: "num" }, String(b.paused)),
        h("td", { class: "num" }, String(b.products)),
        h("td", { class: "num" }, String(b.by_status.failed || 0)),
        h("td", {}, pace(b)),
        h("td", {}, time(b.started_at)),
        h("td", {}, time(b.estimated_end))))) : h("p", { class: "muted" },
      "No batches yet: submit URLs with a batch name."), pager(data, (at) => {
      offset = at;
      load().catch((e) => toast(errorText(e), "error"));
    })].filter(Boolean));
  };
  const reload = () => load().catch((e) => toast(errorText(e), "error"));
  view.append(h("h1", {}, "Batches"));
  if (name) await one(view, name, current, reload);
  view.append(h("h2", {}, "All batches"), list);
  // The list follows along too, at the pace of the batch's own refresh.
  live.on(() => { if (current() && Date.now() - loaded >= EVERY_MS) reload(); });
  await load();
}
