// Tasks: the filterable table with bulk actions, and one task's page.

import {
  api, confirmAction, errorText, field, formValues, go, h, isAdmin, link, outLink, pager, params,
  plural, query, select, sortHeader, statusBadge, table, time, toast,
} from "../lib.js";
import { live } from "../live.js";
import { progressView } from "./progress.js";

const STATUSES = ["", "pending", "queued", "crawling", "downloaded", "queued_parse", "parsing",
  "completed", "failed", "paused", "cancelled"];
const FILTERS = ["status", "domain", "batch_name", "min_priority", "max_priority", "url_contains"];
const ACTIONS = [
  ["pause", "Pause"], ["resume", "Resume"], ["cancel", "Cancel"], ["restart", "Restart"],
  ["restart-parsing", "Restart parsing"],
];
const LIMIT = 50;
const ACTIVE = ["pending", "queued", "crawling", "downloaded", "queued_parse", "parsing"];
// The statuses each action applies to (the API answers 409 for the others).
const ALLOWED = {
  pause: ACTIVE,
  resume: ["paused"],
  cancel: [...ACTIVE, "paused"],
  restart: ["failed", "completed", "cancelled"],
  "restart-parsing": ["failed", "completed", "cancelled", "downloaded"],
  priority: [...ACTIVE, "paused"],
};

function filterForm(values) {
  return h("form", { class: "filters", role: "search", "aria-label": "Filter tasks",
    onsubmit: (event) => {
      event.preventDefault();
      go(`/tasks${query(formValues(event.target))}`);
    } },
  field("Status", select("status", STATUSES.map((s) => [s, s || "any"]), values.status || "")),
  field("Domain", h("input", { name: "domain", value: values.domain || "", size: 16 })),
  field("Batch", h("input", { name: "batch_name", value: values.batch_name || "", size: 12 })),
  field("Priority from", h("input", { name: "min_priority", type: "number", min: 1, max: 10,
    value: values.min_priority || "" })),
  field("to", h("input", { name: "max_priority", type: "number", min: 1, max: 10,
    value: values.max_priority || "" })),
  field("URL contains", h("input", { name: "url_contains", value: values.url_contains || "",
    size: 20 })),
  h("button", { type: "submit", class: "primary" }, "Filter"),
  h("a", { href: "/tasks", "data-link": true }, "Clear"));
}

async function act(ids, action, body) {
  const results = await Promise.all(ids.map(async (id) => {
    try {
      if (action === "priority") await api("PATCH", `/api/tasks/${id}/priority`, body);
      else await api("POST", `/api/tasks/${id}/${action}`, body);
      return null;
    } catch (error) {
      return `#${id}: ${error.message}`;
    }
  }));
  const failed = results.filter(Boolean);
  const done = ids.length - failed.length;
  toast(`${action}: ${done} of ${ids.length} done`);
  for (const message of failed.slice(0, 5)) toast(message, "error");
}

// selection.eligible(action): the selected rows, shown now, whose status the action applies
// to; after any action the selection is cleared, so a later action never reaches rows that
// were ticked for an earlier one.
function actionBar(selection, reload) {
  const priority = h("input", { type: "number", min: 1, max: 10, value: 5, id: "bulk-priority",
    "aria-label": "New priority" });
  const run = (action, label, body) => async () => {
    const { ids, skipped } = selection.eligible(action);
    if (!ids.length) {
      toast(skipped ? `None of the ${plural(skipped, "selected task")} can take "${label}"`
        : "Select tasks first", "error");
      return;
    }
    const tasks = plural(ids.length, "task");
    const besides = skipped ? ` (${skipped} other selected can't: left as they are)` : "";
    if (action === "cancel" && ids.length > 1
        && !(await confirmAction(`Cancel ${tasks}?${besides}`, `Cancel ${tasks}`,
          ids.length === 1 ? "Keep it" : "Keep them"))) return;
    await act(ids, action, body ? body() : undefined);
    selection.clear();
    reload();
  };
  return h("div", { class: "row", role: "group", "aria-label": "Actions on selected tasks" },
    h("span", { class: "muted", "data-testid": "selected-count", "aria-live": "polite" },
      "none selected"),
    ...ACTIONS.map(([action, label]) => h("button", { type: "button", "data-action": action,
      onclick: run(action, label) }, label)),
    field("Priority", priority),
    h("button", { type: "button", "data-action": "priority",
      onclick: run("priority", "Set priority", () => ({ priority: Number(priority.value) })) },
    "Set priority"));
}

async function restartFailed(values, reload) {
  let domainId = null;
  if (values.domain) {
    const found = await api("GET", `/api/domains${query({ q: values.domain, limit: 50 })}`);
    const match = found.items.find((d) => d.domain_name === values.domain.toLowerCase());
    if (!match) { toast(`No domain ${values.domain}`, "error"); return; }
    domainId = match.id;
  }
  const count = await api("GET", `/api/tasks${query({ status: "failed", domain: values.domain,
    limit: 1 })}`);
  if (!count.total) { toast("No failed tasks to restart"); return; }
  const where = values.domain ? ` on ${values.domain}` : "";
  const tasks = plural(count.total, "failed task");
  if (!(await confirmAction(`Restart ${tasks}${where}?`, `Restart ${tasks}`, "Not now"))) return;
  const done = await api("POST", "/api/tasks/restart-failed",
    { domain_id: domainId, limit: 10000 });
  toast(`Restarted ${done.restarted} failed task(s)`);
  reload();
}

function taskRow(task, selection) {
  const box = h("input", { type: "checkbox", "aria-label": `Select task ${task.id}`,
    checked: selection.has(task.id), onchange: (event) => {
      selection.set(task.id, event.target.checked);
    } });
  return h("tr", { "data-task-id": task.id },
    isAdmin() ? h("td", {}, box) : null,
    h("td", {}, link(`/tasks/${task.id}`, `#${task.id}`)),
    h("td", { class: "url" }, task.url),
    h("td", { "data-cell": "status" }, statusBadge(task.status)),
    h("td", { class: "num", "data-cell": "priority" }, String(task.priority)),
    h("td", { class: "num hide-narrow", "data-cell": "retries" }, String(task.retry_count)),
    h("td", { class: "hide-narrow", "data-cell": "error" }, task.error_type || ""),
    h("td", { class: "hide-narrow" }, task.batch_name || ""),
    h("td", { class: "hide-narrow", "data-cell": "updated" }, time(task.updated_at)));
}

export async function render(view, _arg, current) {
  const p = params();
  const values = Object.fromEntries(FILTERS.filter((k) => p.get(k)).map((k) => [k, p.get(k)]));
  const offset = Number(p.get("offset") || 0);
  const sort = p.get("sort") || null; // by clicking a column header; else newest first
  const sortBy = (key) => go(`/tasks${query({ ...values, sort: key })}`);
  const selectedIds = new Set();
  const body = h("div", {});
  const reload = () => load();
  let shown = new Map(); // task id -> status, of the rows on screen (kept live)
  const selection = {
    has: (id) => selectedIds.has(id),
    set(id, on) {
      if (on) selectedIds.add(id); else selectedIds.delete(id);
      this.count();
    },
    clear() {
      selectedIds.clear();
      for (const box of body.querySelectorAll("input[type=checkbox]")) box.checked = false;
      this.count();
    },
    // Only rows still on screen: one that left the page (a filter, a new page) is dropped.
    keepShown() {
      for (const id of [...selectedIds]) if (!shown.has(id)) selectedIds.delete(id);
      this.count();
    },
    eligible(action) {
      const ids = [...selectedIds].filter((id) => ALLOWED[action].includes(shown.get(id)));
      return { ids, skipped: selectedIds.size - ids.length };
    },
    count() {
      const counter = view.querySelector("[data-testid=selected-count]");
      if (!counter) return;
      counter.textContent = selectedIds.size ? `${selectedIds.size} selected` : "none selected";
    },
  };
  view.append(h("h1", {}, "Tasks"), filterForm(values));
  // A batch's progress, its estimated end and why its tasks wait.
  const progress = values.batch_name ? progressView(values.batch_name) : null;
  if (progress) { view.append(progress.el); progress.refresh(true); }
  if (isAdmin()) {
    view.append(actionBar(selection, reload),
      h("div", { class: "row" }, h("button", { type: "button", class: "danger",
        onclick: () => restartFailed(values, reload).catch((e) => toast(errorText(e), "error")),
      }, values.domain ? `Restart all failed on ${values.domain}` : "Restart all failed")));
  }
  view.append(body);
  let loading = false;
  let again = false;

  async function load() {
    if (loading) { again = true; return; }
    loading = true;
    try {
      const data = await api("GET",
        `/api/tasks${query({ ...values, sort, limit: LIMIT, offset })}`);
      if (!current()) return;
      shown = new Map(data.items.map((t) => [t.id, t.status]));
      selection.keepShown();
      const all = h("input", { type: "checkbox", "aria-label": "Select all on this page",
        onchange: (event) => {
          for (const box of body.querySelectorAll("tbody input[type=checkbox]")) {
            box.checked = event.target.checked;
            box.dispatchEvent(new Event("change"));
          }
        } });
      const headers = [isAdmin() ? all : null, sortHeader("Task", "created", sort, sortBy), "URL",
        "Status", "Priority", "Retries", "Error", "Batch",
        sortHeader("Updated", "updated", sort, sortBy)].filter((x) => x !== null);
      const tbl = table(headers, data.items.map((t) => taskRow(t, selection)),
        { "aria-label": "Tasks" });
      for (const [i, th] of [...tbl.querySelectorAll("th")].entries()) {
        const name = headers[i] instanceof Node ? headers[i].textContent : headers[i];
        if (["Retries", "Error", "Batch"].includes(name) || name.startsWith("Updated")) {
          th.classList.add("hide-narrow");
        }
      }
      body.replaceChildren(tbl,
        pager(data, (o) => go(`/tasks${query({ ...values, sort, offset: o })}`)));
    } finally {
      loading = false;
      if (again) { again = false; load(); }
    }
  }

  await load();
  let pending = null;
  live.on((snapshot) => {
    if (!current()) return;
    if (progress) progress.refresh();
    let refetch = snapshot.more_changes;
    const newest = Math.max(0, ...shown.keys());
    for (const change of snapshot.changed_tasks) {
      const row = body.querySelector(`tr[data-task-id="${change.id}"]`);
      if (row) {
        shown.set(change.id, change.status);
        row.querySelector("[data-cell=status]").replaceChildren(statusBadge(change.status));
        row.querySelector("[data-cell=priority]").textContent = String(change.priority);
        row.querySelector("[data-cell=retries]").textContent = String(change.retry_count);
        row.querySelector("[data-cell=error]").textContent = change.error_type || "";
        row.querySelector("[data-cell=updated]").replaceChildren(time(change.updated_at));
        row.classList.remove("flash"); void row.offsetWidth; row.classList.add("flash");
        if (values.status && change.status !== values.status) refetch = true;
      } else if (offset === 0 && change.id > newest) {
        refetch = true; // a new task for the first page (or one entering the filter)
      } else if (values.status && change.status === values.status && offset === 0) {
        refetch = true;
      }
    }
    if (refetch && !pending) pending = setTimeout(() => { pending = null; load(); }, 300);
  });
}

function attemptsTable(attempts) {
  if (!attempts.length) return h("p", { class: "muted" }, "No attempts yet.");
  return table(["#", "Phase", "Outcome", "Started", "HTTP", "Time", "Bytes", "Error"],
    attempts.map((a) => h("tr", {}, h("td", {}, String(a.id)), h("td", {}, a.phase),
      h("td", {}, a.outcome), h("td", {}, time(a.started_at)),
      h("td", {}, a.status_code ?? ""), h("td", { class: "num" },
        a.response_time_ms === null ? "" : `${a.response_time_ms} ms`),
      h("td", { class: "num" }, a.bytes_received ?? ""),
      h("td", {}, a.error_type ? `${a.error_type}: ${a.error_message || ""}` : ""))));
}

function timeline(events) {
  if (!events.length) return h("p", { class: "muted" }, "No events.");
  return h("ol", { class: "timeline" }, events.map((e) => h("li", {},
    time(e.created_at), " ", h("b", {}, e.event),
    e.details ? h("span", { class: "muted" }, ` ${JSON.stringify(e.details)}`) : null)));
}

function recurrence(task) {
  if (!task.is_recurring) return "no";
  if (!task.adaptive_recrawl) return `every ${task.crawl_frequency_seconds} s`;
  return h("span", { "data-testid": "recrawl" },
    `adaptive: every ${task.current_crawl_frequency_seconds} s — ${task.crawl_frequency_reason}`,
    h("span", { class: "muted" }, ` (from ${task.crawl_frequency_seconds} s, between `
      + `${task.min_crawl_frequency_seconds} and ${task.max_crawl_frequency_seconds} s)`));
}

function recrawlForm(task, reload) {
  const recurring = h("input", { type: "checkbox", checked: task.is_recurring });
  const adaptive = h("input", { type: "checkbox", checked: task.adaptive_recrawl });
  const every = h("input", { type: "number", min: 60, value: task.crawl_frequency_seconds,
    id: "task-frequency" });
  return h("div", { class: "row", role: "group", "aria-label": "Recrawl" },
    h("label", { class: "inline" }, recurring, "Recurring"),
    field("Every (seconds)", every),
    h("label", { class: "inline" }, adaptive, "Adaptive"),
    h("button", { type: "button", onclick: async () => {
      try {
        await api("PATCH", `/api/tasks/${task.id}/recrawl`, { is_recurring: recurring.checked,
          adaptive_recrawl: adaptive.checked && recurring.checked,
          crawl_frequency_seconds: Number(every.value) });
        toast("Recrawl settings changed");
      } catch (error) { toast(errorText(error), "error"); }
      reload();
    } }, "Set recrawl"));
}

function taskActions(task, reload) {
  if (!isAdmin()) return null;
  const priority = h("input", { type: "number", min: 1, max: 10, value: task.priority,
    id: "task-priority" });
  return h("div", { class: "row", role: "group", "aria-label": "Task actions" },
    ...ACTIONS.filter(([a]) => ALLOWED[a].includes(task.status)).map(([action, label]) =>
      h("button", { type: "button", "data-action": action, onclick: async () => {
        if (action === "cancel" && !(await confirmAction(`Cancel task #${task.id}?`,
          `Cancel task #${task.id}`, "Keep it"))) return;
        try {
          await api("POST", `/api/tasks/${task.id}/${action}`);
          toast(`${label}: done`);
        } catch (error) { toast(errorText(error), "error"); }
        reload();
      } }, label)),
    field("Priority", priority),
    h("button", { type: "button", onclick: async () => {
      try {
        await api("PATCH", `/api/tasks/${task.id}/priority`, { priority: Number(priority.value) });
        toast("Priority changed");
      } catch (error) { toast(errorText(error), "error"); }
      reload();
    } }, "Set priority"));
}

export async function renderOne(view, id, current) {
  const body = h("div", {});
  view.append(h("p", {}, link("/tasks", "← Tasks")), body);
  async function load() {
    const task = await api("GET", `/api/tasks/${id}`);
    if (!current()) return;
    document.title = `Task #${id} · Forager`;
    const product = h("div", {});
    body.replaceChildren(
      h("h1", {}, `Task #${task.id} `, statusBadge(task.status)),
      taskActions(task, load),
      isAdmin() ? recrawlForm(task, load) : null,
      h("dl", { class: "facts card" },
        ...[["URL", outLink(task.url)],
        ["Priority", String(task.priority)], ["Retries", `${task.retry_count} / ${task.max_retries}`],
        ["Scheduled", time(task.scheduled_at)], ["Started", time(task.started_at)],
        ["Completed", time(task.completed_at)], ["HTTP status", task.http_status_code ?? "—"],
        ["Error", task.error_type ? `${task.error_type}: ${task.error_message}` : "—"],
        ["Recurring", recurrence(task)],
        ["Next crawl", time(task.next_crawl_at)],
        ["Batch", task.batch_name || "—"], ["Created by", task.created_by],
        ["Created", time(task.created_at)], ["Updated", time(task.updated_at)]]
          .flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
      h("h2", {}, "Extracted product"), product,
      h("h2", {}, "Attempts"), attemptsTable(task.attempts),
      h("h2", {}, "Events"), timeline(task.events),
      h("h2", {}, "Stored page"),
      task.html_path ? h("iframe", { class: "stored", src: `/ui/tasks/${task.id}/page`,
        sandbox: "", title: `Stored page of task ${task.id} (scripts disabled)`,
        referrerpolicy: "no-referrer" })
        : h("p", { class: "muted" }, "No page stored."));
    const found = await api("GET", `/ui/tasks/${id}/product`);
    if (!current()) return;
    if (found.product_id) {
      const p = await api("GET", `/api/products/${found.product_id}`);
      product.replaceChildren(h("p", {}, link(`/products/${p.id}`, p.product_name), " — ",
        p.price === null ? "no price" : `${p.price} ${p.currency || ""}`,
        p.brand ? ` · ${p.brand}` : ""));
    } else {
      product.replaceChildren(h("p", { class: "muted" }, "None yet."));
    }
  }
  await load();
  live.on((snapshot) => {
    if (current() && snapshot.changed_tasks.some((t) => t.id === id)) load();
  });
}
