// Mission Control (seed 003, Apêndice A "Interface"): the orchestrator's run, its settings,
// live status of every worker service and mission, the queue, cancel, and each mission's log.
// Redrawn from the API whenever the shared live stream says an event was recorded.

import {
  api, confirmAction, errorText, field, go, h, isAdmin, link, params, query, select,
  statusBadge, table, time, toast,
} from "../lib.js";
import { live } from "../live.js";

const LANGUAGES = ["pt", "en", "es", "fr", "de", "it"];
const STATUSES = ["", "draft", "queued", "running", "completed", "failed", "canceled"];
const QUEUEABLE = new Set(["draft", "failed", "canceled"]);
const CANCELABLE = new Set(["queued", "running"]);

async function act(method, path, body, done) {
  try {
    const result = await api(method, path, body);
    if (done) done(result);
    return result;
  } catch (error) {
    toast(errorText(error), "error");
    return null;
  }
}

function controlView(state, reload) {
  const running = state.run_requested;
  const counts = Object.entries(state.missions_by_status)
    .map(([status, n]) => h("li", {}, statusBadge(status), ` ${n}`));
  const limit = h("input", { name: "session_limit", type: "number", min: 1, max: 1000,
    value: state.session_limit, disabled: !isAdmin() });
  const retries = h("input", { name: "max_retries", type: "number", min: 0, max: 20,
    value: state.max_retries, disabled: !isAdmin() });
  return h("section", { class: "card", "aria-label": "Orchestrator" },
    h("p", { "data-testid": "orchestrator-state" },
      running ? (state.running ? "Running" : "Starting…") : "Stopped",
      state.leader_id && state.running ? h("span", { class: "muted" }, ` — ${state.leader_id}`)
        : null),
    h("ul", { class: "row", "data-testid": "mission-counts" }, counts),
    isAdmin() ? h("div", { class: "row" },
      h("button", { type: "button", class: "primary", disabled: running,
        onclick: () => act("POST", "/api/missions/control/start", undefined, reload) }, "Start"),
      h("button", { type: "button", disabled: !running,
        onclick: () => act("POST", "/api/missions/control/stop", undefined, reload) }, "Stop"))
      : null,
    h("form", { class: "row", onsubmit: (event) => {
      event.preventDefault();
      act("PATCH", "/api/missions/settings", { session_limit: Number(limit.value),
        max_retries: Number(retries.value) }, () => { toast("Settings saved"); reload(); });
    } }, field("Missions per session", limit), field("Retries", retries),
    isAdmin() ? h("button", { type: "submit" }, "Save settings") : null));
}

function workersView(workers, reload) {
  const rows = workers.map((w) => h("tr", { "data-worker": w.name },
    h("td", {}, w.name), h("td", {}, statusBadge(w.status)),
    h("td", { class: "num" }, String(w.session_count)),
    h("td", {}, w.current_mission_id ? link(`/missions?mission=${w.current_mission_id}`,
      `#${w.current_mission_id}`) : "—"),
    h("td", {}, w.proxy_name || "—"), h("td", {}, w.last_error_code || ""),
    h("td", {}, w.active ? "active" : "off"),
    h("td", {}, isAdmin() ? [
      h("button", { type: "button", onclick: () => act("POST",
        `/api/worker-services/${w.id}/test`, undefined, (r) => {
          toast(`${w.name}: ${r.detail}`, r.ok ? "" : "error"); reload();
        }) }, "Test"),
      h("button", { type: "button", onclick: () => act("PATCH", `/api/worker-services/${w.id}`,
        { active: !w.active }, reload) }, w.active ? "Deactivate" : "Activate"),
    ] : null)));
  return rows.length ? table(["Worker service", "Status", "Session", "Mission", "Proxy",
    "Last error", "", ""], rows) : h("p", { class: "muted" }, "No worker service yet.");
}

function serviceForm(kind, reload) {
  const path = kind === "writer" ? "/api/writers" : "/api/worker-services";
  const inputs = { name: h("input", { name: "name", required: true, maxlength: 100 }),
    url: h("input", { name: "url", required: true, placeholder: "http://10.0.0.5:8081" }),
    api_key: h("input", { name: "api_key", type: "password", required: true,
      autocomplete: "off" }) };
  if (kind !== "writer") inputs.storage_domain = h("input", { name: "storage_domain" });
  const labels = { name: "name", url: "URL", api_key: "API key",
    storage_domain: "storage domain" };
  return h("form", { class: "row", onsubmit: (event) => {
    event.preventDefault();
    const body = Object.fromEntries(Object.entries(inputs)
      .filter(([, input]) => input.value.trim()).map(([k, input]) => [k, input.value.trim()]));
    act("POST", path, body, () => { event.target.reset(); reload(); });
  } }, Object.entries(inputs).map(([k, input]) => field(`${kind === "writer" ? "Writer"
    : "Worker"} ${labels[k]}`, input)),
  h("button", { type: "submit" }, kind === "writer" ? "Add writer" : "Add worker service"));
}

function createForm(reload) {
  const start = h("input", { name: "date_start", type: "date", required: true });
  const end = h("input", { name: "date_end", type: "date", required: true });
  const media = select("media_type", [["all", "all"], ["video", "video"], ["image", "image"]],
    "all");
  const langs = LANGUAGES.map((l) => h("label", {}, h("input", { type: "checkbox", name: "lang",
    value: l, checked: l === "pt" }), ` ${l}`));
  const split = h("input", { type: "checkbox", name: "split_by_day", checked: true });
  const queue = h("input", { type: "checkbox", name: "queue" });
  return h("form", { class: "row", "aria-label": "New missions", onsubmit: (event) => {
    event.preventDefault();
    const languages = langs.map((l) => l.firstChild).filter((c) => c.checked).map((c) => c.value);
    act("POST", "/api/missions", { date_start: start.value, date_end: end.value || start.value,
      media_type: media.value, languages, split_by_day: split.checked, queue: queue.checked },
    (r) => { toast(`${r.missions.length} mission(s) created`); reload(); });
  } }, field("First day", start), field("Last day", end), field("Media", media),
  h("fieldset", {}, h("legend", {}, "Languages"), langs),
  h("label", {}, split, " one per day"), h("label", {}, queue, " queue now"),
  h("button", { type: "submit", class: "primary" }, "Create missions"));
}

function missionsView(page, selected, reload) {
  const rows = page.items.map((m) => h("tr", { "data-mission-id": m.id },
    h("td", {}, QUEUEABLE.has(m.status) && isAdmin() ? h("input", { type: "checkbox",
      "aria-label": `Select mission ${m.id}`, checked: selected.has(m.id),
      onchange: (e) => (e.target.checked ? selected.add(m.id) : selected.delete(m.id)) })
      : null),
    h("td", {}, link(`/missions${query({ ...Object.fromEntries(params()), mission: m.id })}`,
      `#${m.id}`)),
    h("td", {}, m.date_start === m.date_end ? m.date_start : `${m.date_start} → ${m.date_end}`),
    h("td", {}, `${m.media_type} · ${m.languages.join(", ")}`),
    h("td", {}, statusBadge(m.status)), h("td", {}, m.checkpoint || "—"),
    h("td", { class: "num" }, m.ads_count === null ? "—" : String(m.ads_count)),
    h("td", { class: "num" }, String(m.retry_count)), h("td", {}, m.error_code || ""),
    h("td", {}, CANCELABLE.has(m.status) && isAdmin() ? h("button", { type: "button",
      onclick: async () => {
        if (await confirmAction(`Cancel mission #${m.id}?`, `Cancel mission #${m.id}`,
          "Keep it running")) {
          act("POST", `/api/missions/${m.id}/cancel`, undefined, reload);
        }
      } }, "Cancel") : null)));
  return [
    isAdmin() ? h("p", {}, h("button", { type: "button", onclick: () => act("POST",
      "/api/missions/queue", { mission_ids: [...selected] }, (r) => {
        selected.clear();
        toast(`${r.queued.length} queued${r.refused.length ? `, ${r.refused.length} refused`
          : ""}`);
        reload();
      }) }, "Add to queue")) : null,
    rows.length ? table(["", "Mission", "Dates", "Filters", "Status", "Checkpoint", "Ads",
      "Retries", "Error", ""], rows) : h("p", { class: "muted" }, "No missions."),
    h("p", { class: "muted" }, `${page.total} mission(s)`),
  ];
}

function timelineView(id, events) {
  return h("section", { class: "card", "aria-label": `Log of mission ${id}` },
    h("h2", {}, `Mission #${id}: log`),
    table(["When", "Event", "Details"], events.map((e) => h("tr", { "data-event": e.event },
      h("td", {}, time(e.created_at)), h("td", {}, e.event),
      h("td", { class: "url" }, e.details ? JSON.stringify(e.details) : "")))));
}

export async function render(view, _arg, current) {
  const p = params();
  const status = p.get("status") || "";
  const mission = Number(p.get("mission")) || null;
  const selected = new Set();
  const parts = { control: h("div", {}), workers: h("div", {}), writers: h("div", {}),
    missions: h("div", {}), log: h("div", {}) };
  const filter = select("status", STATUSES.map((s) => [s, s || "any"]), status,
    { onchange: (e) => go(`/missions${query({ status: e.target.value })}`) });
  let reload = null;
  view.append(h("h1", {}, "Missions"),
    h("p", { class: "muted" }, "A mission is one ad-library search (a date range, a media type, "
      + "languages) that a worker service scrapes and a writer stores: add both below, queue "
      + "missions, then Start."),
    parts.control,
    h("h2", {}, "Worker services"), parts.workers,
    isAdmin() ? serviceForm("worker", () => reload()) : null,
    h("h2", {}, "Writers"), parts.writers, isAdmin() ? serviceForm("writer", () => reload()) : null,
    h("h2", {}, "Queue"), isAdmin() ? createForm(() => reload()) : null,
    h("div", { class: "row" }, field("Status", filter)), parts.missions, parts.log);
  reload = async () => {
    const [state, writers, page, events] = await Promise.all([
      api("GET", "/api/missions/control"),
      api("GET", "/api/writers?limit=100"),
      api("GET", `/api/missions${query({ status, limit: 100 })}`),
      mission ? api("GET", `/api/missions/${mission}/timeline`) : Promise.resolve(null),
    ]);
    if (!current()) return;
    parts.control.replaceChildren(controlView(state, reload));
    parts.workers.replaceChildren(workersView(state.workers, reload));
    parts.writers.replaceChildren(writers.items.length ? table(["Writer", "URL", "", ""],
      writers.items.map((w) => h("tr", {}, h("td", {}, w.name), h("td", { class: "url" }, w.url),
        h("td", {}, w.active ? "active" : "off"),
        h("td", {}, isAdmin() ? h("button", { type: "button", onclick: () => act("POST",
          `/api/writers/${w.id}/test`, undefined, (r) => toast(`${w.name}: ${r.detail}`,
            r.ok ? "" : "error")) }, "Test") : null)))) : h("p", { class: "muted" },
      "No writer yet."));
    parts.missions.replaceChildren(...missionsView(page, selected, reload));
    parts.log.replaceChildren(events ? timelineView(mission, events) : "");
  };
  await reload();
  let seen = null;
  let pending = null;
  live.on((snapshot) => {
    if (!current() || snapshot.last_event_id === seen) return;
    const first = seen === null;
    seen = snapshot.last_event_id;
    if (!first && !pending) pending = setTimeout(() => { pending = null; reload(); }, 300);
  }, true);
}
