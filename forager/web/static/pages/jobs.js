// Crawl jobs (issue 32): each job's progress (discovered, queued, fetched, parsed, products,
// errors, by depth), pause / resume / cancel / run again, a form to start one, and a preview of
// what its rules take from a stored page before it starts. Redrawn live from the shared stream.

import {
  api, confirmAction, errorText, field, go, h, isAdmin, link, pager, params, plural, query,
  select, sortHeader, statusBadge, table, time, toast,
} from "../lib.js";
import { live } from "../live.js";
import { profileEditor } from "../profile.js";

const LIMIT = 20;
const COUNTS = ["discovered", "queued", "in_flight", "fetched", "parsed", "products", "errors"];
const ACTIONS = { running: ["pause", "cancel"], paused: ["resume", "cancel"],
  done: ["rerun"], cancelled: ["rerun"] };
const LABELS = { pause: "Pause", resume: "Resume", cancel: "Cancel", rerun: "Run again" };

async function act(job, action, reload) {
  if (action === "cancel" && !await confirmAction(
    `Cancel job #${job.id} (${job.name}) and its waiting tasks?`, `Cancel job #${job.id}`,
    "Keep it")) return;
  try {
    await api("POST", `/api/jobs/${job.id}/${action}`);
    toast(`Job #${job.id}: ${LABELS[action].toLowerCase()}`);
  } catch (error) { toast(errorText(error), "error"); }
  reload();
}

function jobRow(job, reload) {
  const p = job.progress;
  return h("tr", { "data-job": job.id },
    h("td", {}, link(`/jobs${query({ ...Object.fromEntries(params()), job: job.id })}`,
      `#${job.id}`)),
    h("td", {}, job.name),
    h("td", { "data-cell": "status" }, statusBadge(job.status)),
    COUNTS.map((k) => h("td", { class: "num", "data-cell": k }, String(p[k]))),
    h("td", { class: "num hide-narrow" }, `${job.pages_queued} / ${job.max_pages}`),
    h("td", { class: "hide-narrow" }, time(job.started_at)),
    h("td", {}, isAdmin() ? (ACTIONS[job.status] || []).map((a) => h("button", {
      type: "button", "aria-label": `${LABELS[a]} job ${job.id}`,
      onclick: () => act(job, a, reload) }, LABELS[a])) : null));
}

function depthView(job) {
  const p = job.progress;
  return h("section", { class: "card", "aria-label": `Job ${job.id} by depth` },
    h("h2", {}, `Job #${job.id}: ${job.name}`),
    h("p", { class: "muted" }, `Scope ${job.scope} (${job.hosts.join(", ")}); `,
      `${plural(job.rules.length, "rule")}; links seen ${p.links_seen}, refused `,
      `${p.links_refused}; depth ≤ ${job.max_depth}; ends `, time(job.ends_at),
      job.next_run_at ? [`; next run `, time(job.next_run_at)] : null),
    table(["Depth", "Discovered", "Fetched", "Parsed", "Errors"], p.by_depth.map((d) =>
      h("tr", { "data-depth": d.depth }, h("td", { class: "num" }, String(d.depth)),
        ["discovered", "fetched", "parsed", "errors"].map((k) =>
          h("td", { class: "num", "data-cell": k }, String(d[k])))))));
}

// One rule a line, as `forager job start --rule`: ACTION=PATTERN, ACTION=glob:PATTERN, @CSS,
// parse/SECONDS=… (the rule's recrawl schedule).
function parseRules(text) {
  return text.split("\n").map((l) => l.trim()).filter(Boolean).map((line) => {
    const at = line.indexOf("=");
    const [action, every] = (at < 0 ? line : line.slice(0, at)).split("/");
    let pattern = at < 0 ? "" : line.slice(at + 1);
    let region = null;
    const cut = pattern.lastIndexOf("@");
    if (cut > 0) { region = pattern.slice(cut + 1) || null; pattern = pattern.slice(0, cut); }
    let syntax = "regex";
    if (pattern.startsWith("glob:")) { syntax = "glob"; pattern = pattern.slice(5); }
    const rule = { action: action.trim(), pattern, syntax, region };
    if (every) rule.recrawl_seconds = Number(every);
    return rule;
  });
}

function lines(text) {
  return text.split(/[\n,]/).map((l) => l.trim()).filter(Boolean);
}

function policyOf(inputs) {
  return {
    scope: inputs.scope.value,
    hosts: lines(inputs.hosts.value),
    rules: parseRules(inputs.rules.value),
    follow_nofollow: inputs.follow_nofollow.checked,
    max_query_params: Number(inputs.max_query_params.value),
    max_url_length: Number(inputs.max_url_length.value),
  };
}

function previewView(result) {
  const counts = {};
  for (const l of result.links) counts[l.fate] = (counts[l.fate] || 0) + 1;
  return h("section", { "aria-label": "Rule preview" },
    h("p", { "data-testid": "preview-summary" }, `${result.url}: `,
      Object.entries(counts).map(([fate, n]) => `${n} ${fate}`).join(", ") || "no links"),
    result.error ? h("p", { class: "alert", role: "alert" }, result.error) : null,
    table(["Link", "Fate", "Rule"], result.links.map((l) => h("tr", { "data-fate": l.fate },
      h("td", { class: "url" }, l.url), h("td", {}, statusBadge(l.fate)),
      h("td", { class: "num" }, l.rule === null ? "—" : String(l.rule + 1))))));
}

function startForm(reload) {
  const text = (name, attrs) => h("textarea", { name, rows: 3, ...(attrs || {}) });
  const num = (name, value, min, max) => h("input", { name, type: "number", value, min, max,
    class: "short" });
  const inputs = {
    name: h("input", { name: "name", required: true, maxlength: 100 }),
    start_urls: text("start_urls", { placeholder: "https://shop.example.com/" }),
    sitemap_urls: text("sitemap_urls", { placeholder: "https://shop.example.com/sitemap.xml" }),
    scope: select("scope", [["host", "same host"], ["domain", "same registrable domain"],
      ["hosts", "the hosts listed"]], "host"),
    hosts: h("input", { name: "hosts", placeholder: "shop.example.com, img.example.com" }),
    rules: text("rules", { placeholder: "follow=/c/[a-z-]+$@nav\nparse=glob:https://shop.example.com/p/*" }),
    follow_nofollow: h("input", { type: "checkbox", name: "follow_nofollow" }),
    robots_sitemaps: h("input", { type: "checkbox", name: "robots_sitemaps" }),
    max_depth: num("max_depth", 5, 0, 100),
    max_pages: num("max_pages", 10000, 1, 10000000),
    max_duration_seconds: num("max_duration_seconds", 86400, 60, 7776000),
    max_query_params: num("max_query_params", 3, 0, 50),
    max_url_length: num("max_url_length", 512, 32, 2048),
    rerun_every_seconds: h("input", { name: "rerun_every_seconds", type: "number", min: 60,
      class: "short", placeholder: "by hand" }),
  };
  // The job's request profile (docs/DISCOVERY.md): over its domains' for every task it finds.
  const profile = profileEditor(null, "Job");
  const userAgent = h("input", { name: "user_agent", size: 40, maxlength: 255,
    placeholder: "the domains' own" });
  const profileOf = () => {
    const given = profile.value();
    if (userAgent.value.trim()) given.user_agent = userAgent.value.trim();
    return given.headers.length || given.cookies.length || given.user_agent ? given : null;
  };
  const message = h("p", { role: "alert", class: "muted" });
  const previewTask = h("input", { name: "preview_task", type: "number", min: 1, class: "short" });
  const preview = h("div", { "data-testid": "preview" });
  const form = h("form", { class: "card", "aria-label": "Start a crawl job", onsubmit: async (e) => {
    e.preventDefault();
    message.textContent = "";
    const body = { name: inputs.name.value.trim(), start_urls: lines(inputs.start_urls.value),
      sitemap_urls: lines(inputs.sitemap_urls.value), ...policyOf(inputs),
      robots_sitemaps: inputs.robots_sitemaps.checked,
      max_depth: Number(inputs.max_depth.value), max_pages: Number(inputs.max_pages.value),
      max_duration_seconds: Number(inputs.max_duration_seconds.value),
      rerun_every_seconds: inputs.rerun_every_seconds.value
        ? Number(inputs.rerun_every_seconds.value) : null, request_profile: profileOf() };
    try {
      const job = await api("POST", "/api/jobs", body);
      toast(`Job #${job.id} started`);
      go(`/jobs${query({ job: job.id })}`);
    } catch (error) { message.textContent = errorText(error); }
  } },
  h("h2", {}, "Start a job"),
  h("div", { class: "row" }, field("Name", inputs.name), field("Scope", inputs.scope),
    field("Hosts (scope: hosts listed)", inputs.hosts)),
  field("Start URLs, one per line", inputs.start_urls),
  field("Sitemap URLs, one per line", inputs.sitemap_urls),
  field("Rules, one per line: follow|parse|ignore=PATTERN (glob:PATTERN), @CSS region, "
    + "parse/SECONDS= to recrawl",
    inputs.rules),
  h("div", { class: "row" },
    field("Max depth", inputs.max_depth), field("Max pages", inputs.max_pages),
    field("Max duration (s)", inputs.max_duration_seconds),
    field("Max query parameters", inputs.max_query_params),
    field("Max URL length", inputs.max_url_length),
    field("Run again every (s)", inputs.rerun_every_seconds),
    h("label", { class: "inline" }, inputs.follow_nofollow, "Follow nofollow links"),
    h("label", { class: "inline" }, inputs.robots_sitemaps, "robots.txt sitemaps")),
  h("details", { "data-testid": "job-profile" }, h("summary", {}, "Request profile"),
    field("User agent", userAgent), profile.element),
  h("div", { class: "row" },
    field("Preview on the stored page of task", previewTask),
    h("button", { type: "button", onclick: async () => {
      message.textContent = "";
      try {
        const result = await api("POST", "/api/jobs/preview", { task_id: Number(previewTask.value),
          start_urls: lines(inputs.start_urls.value), ...policyOf(inputs) });
        preview.replaceChildren(previewView(result));
      } catch (error) { message.textContent = errorText(error); }
    } }, "Preview rules"),
    h("button", { type: "submit", class: "primary" }, "Start job")),
  message, preview);
  return form;
}

export async function render(view, _arg, current) {
  const p = params();
  const sort = p.get("sort") || null;
  const offset = Number(p.get("offset")) || 0;
  const selected = Number(p.get("job")) || null;
  const sortBy = (key) => go(`/jobs${query({ sort: key, job: selected })}`);
  const parts = { list: h("div", {}), detail: h("div", {}) };
  let reload = null;
  view.append(h("h1", {}, "Crawl jobs"),
    h("p", { class: "muted" }, "A job finds a site's pages itself from start URLs and sitemaps, "
      + "within its scope, rules and budgets (docs/DISCOVERY.md)."),
    parts.list, parts.detail, isAdmin() ? startForm(() => reload()) : null);
  reload = async () => {
    const page = await api("GET", `/api/jobs${query({ sort, limit: LIMIT, offset })}`);
    const ids = page.items.map((j) => j.id);
    if (selected && !ids.includes(selected)) ids.push(selected);
    const jobs = await Promise.all(ids.map((id) => api("GET", `/api/jobs/${id}`)));
    if (!current()) return;
    const byId = Object.fromEntries(jobs.map((j) => [j.id, j]));
    const headers = [sortHeader("Job", "created", sort, sortBy), sortHeader("Name", "name", sort,
      sortBy), sortHeader("Status", "status", sort, sortBy), "Discovered", "Queued", "In flight",
    "Fetched", "Parsed", "Products", "Errors", "Pages / budget", "Started", ""];
    parts.list.replaceChildren(page.items.length
      ? table(headers, page.items.map((j) => jobRow(byId[j.id], reload)), { class: "stack" })
      : h("p", { class: "muted" }, "No crawl job yet."),
    pager(page, (o) => go(`/jobs${query({ sort, offset: o })}`)) || "");
    parts.detail.replaceChildren(selected && byId[selected] ? depthView(byId[selected]) : "");
  };
  await reload();
  let seen = null;
  let pending = null;
  live.on((snapshot) => {
    if (!current()) return;
    const moved = snapshot.changed_tasks.length > 0 || snapshot.last_event_id !== seen;
    const first = seen === null;
    seen = snapshot.last_event_id;
    if (!first && moved && !pending) pending = setTimeout(() => { pending = null; reload(); }, 300);
  }, true);
}
