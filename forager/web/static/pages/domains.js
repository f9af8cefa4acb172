// Domains: settings edited in place (robots.txt, proxy strategy too), per-domain stats, each
// domain's request profile (headers, cookies, user agent; secrets masked) and routing, and its
// sticky sessions (state, uses, age, proxy; never a cookie), retired one by one or all at once.

import {
  api, confirmAction, errorText, field, formValues, go, h, isAdmin, link, pager, params, plural,
  query, statusBadge, table, time, toast,
} from "../lib.js";
import { profileEditor } from "../profile.js";

const FETCHERS = ["http", "impersonate", "browser", "auto"];
const STRATEGIES = ["lru", "random", "exclusive"];
const ROUTINGS = [["any", "any worker"], ["agents_preferred", "agents preferred"],
  ["agents_only", "agents only"]];

// The request profile and routing of a domain, in a <details> (docs/DASHBOARD.md): secret
// values never come to the browser; a stored one is shown masked and kept unless replaced.
function shopperEditor(domain, reload) {
  const name = domain.domain_name;
  const editor = profileEditor(domain.request_profile, name);
  const userAgent = h("input", { value: domain.user_agent, size: 40, maxlength: 255,
    "aria-label": `User agent of ${name}` });
  const routing = h("select", { "aria-label": `Routing of ${name}` },
    ROUTINGS.map(([v, text]) => h("option", { value: v, selected: v === domain.routing }, text)));
  const save = async () => {
    try {
      await api("PATCH", `/api/domains/${domain.id}`, { request_profile: editor.value(),
        user_agent: userAgent.value.trim(), routing: routing.value });
      toast(`${name}: profile and routing saved`);
      reload();
    } catch (error) { toast(errorText(error), "error"); }
  };
  return h("details", { "data-testid": "shopper" }, h("summary", {}, "Profile & routing"),
    h("div", { class: "row" }, field("User agent", userAgent), field("Routing", routing)),
    editor.element,
    h("button", { type: "button", class: "primary", onclick: save }, "Apply profile & routing"));
}

// What "auto" remembers (docs/FETCHING.md): the fetcher that last worked, why, the next probe.
function autoFetcher(domain) {
  if (domain.fetcher !== "auto") return null;
  const current = domain.auto_fetcher || "http";
  return h("div", { class: "muted", "data-testid": "auto-fetcher", "data-fetcher": current,
    title: domain.auto_fetcher_reason || "" },
  `uses ${current}`, domain.auto_fetcher_reason ? `: ${domain.auto_fetcher_reason}` : "",
  domain.auto_fetcher_changed_at ? [" (since ", time(domain.auto_fetcher_changed_at), ")"] : "",
  domain.auto_fetcher_probe_at ? [", tries http again ", time(domain.auto_fetcher_probe_at)]
    : "");
}

function age(seconds) {
  if (seconds < 120) return `${Math.round(seconds)} s`;
  return seconds < 7200 ? `${Math.round(seconds / 60)} min` : `${(seconds / 3600).toFixed(1)} h`;
}

// The domain's sticky sessions (docs/FETCHING.md), loaded when opened: what the API shows of
// each (its cookies stay sealed on the server: only whether it has any), retire for admins.
function sessionsView(domain) {
  const name = domain.domain_name;
  const policy = domain.sticky_sessions;
  const body = h("div", {});
  const retire = async (path, what) => {
    try {
      const done = await api("POST", `/api/domains/${domain.id}/sessions/${path}`);
      toast(done.retired === undefined ? `${name}: ${what} retired`
        : `${name}: ${plural(done.retired, "session")} retired`);
    } catch (error) { toast(errorText(error), "error"); }
    await load();
  };
  const retireAll = async () => {
    if (!(await confirmAction(`Retire every active session of ${name}? Their cookies are `
      + "erased; the next fetches start new ones.", "Retire them all", "Keep them"))) return;
    await retire("retire", "all sessions");
  };
  async function load() {
    try {
      const page = await api("GET", `/api/domains/${domain.id}/sessions?limit=50`);
      const active = page.items.filter((x) => x.state === "active").length;
      body.replaceChildren(
        h("p", { class: "muted" }, policy ? `On: a session serves ${plural(policy.max_uses,
          "fetch", "fetches")} or ${policy.max_age_minutes} min` + (policy.warmup_url
          ? `, each warmed up at ${policy.warmup_url}` : "") : "Off for this domain (the "
          + "sessions below, if any, are kept).", `. ${plural(page.total, "session")}, `
          + `newest first.`),
        page.items.length ? table(["Session", "State", "Uses", "Error score", "Age", "Proxy",
          "Cookies", "Last used", "Retired", ""], page.items.map((x) => h("tr", {
          "data-session": x.id },
        h("td", { class: "num" }, `#${x.id}`),
        h("td", { "data-cell": "state" }, statusBadge(x.state), x.leased ? " (in use)" : ""),
        h("td", { class: "num" }, String(x.uses)),
        h("td", { class: "num" }, String(x.error_score)),
        h("td", { class: "num" }, age(x.age_seconds)),
        h("td", {}, x.proxy_id === null ? "direct" : `#${x.proxy_id}`),
        h("td", {}, x.has_cookies ? "kept (not shown)" : "none"),
        h("td", {}, time(x.last_used_at)),
        h("td", {}, x.retired_at ? [time(x.retired_at), ` (${x.retired_reason})`] : ""),
        h("td", {}, isAdmin() && x.state === "active" ? h("button", { type: "button",
          "aria-label": `Retire session ${x.id}`,
          onclick: () => retire(`${x.id}/retire`, `session ${x.id}`) }, "Retire") : null))),
        { class: "stack", "aria-label": `Sessions of ${name}` })
          : h("p", { class: "muted" }, "No sessions."),
        isAdmin() && active ? h("button", { type: "button", class: "danger",
          onclick: retireAll }, `Retire all ${plural(active, "active session")}`) : null);
    } catch (error) {
      body.replaceChildren(h("p", { class: "alert", role: "alert" }, errorText(error)));
    }
  }
  return h("details", { "data-testid": "sessions", ontoggle: (event) => {
    if (event.target.open) load();
  } }, h("summary", {}, "Sticky sessions"), body);
}

function editRow(domain, reload, wait) {
  const admin = isAdmin();
  const delay = h("input", { type: "number", step: "0.1", min: 0, value: domain.crawl_delay_seconds,
    "aria-label": `Delay of ${domain.domain_name}`, disabled: !admin, class: "short" });
  const concurrency = h("input", { type: "number", min: 1, max: 1000,
    value: domain.max_concurrent_requests, "aria-label": `Concurrency of ${domain.domain_name}`,
    disabled: !admin, class: "short" });
  const parser = h("input", { value: domain.parser_name, size: 10,
    "aria-label": `Parser of ${domain.domain_name}`, disabled: !admin });
  const fetcher = h("select", { "aria-label": `Fetcher of ${domain.domain_name}`, disabled: !admin },
    FETCHERS.map((f) => h("option", { value: f, selected: f === domain.fetcher }, f)));
  const active = h("input", { type: "checkbox", checked: domain.is_active,
    "aria-label": `${domain.domain_name} active`, disabled: !admin });
  const ignoreRobots = h("input", { type: "checkbox", checked: domain.ignore_robots,
    "aria-label": `Ignore robots.txt for ${domain.domain_name}`, disabled: !admin });
  const images = h("input", { type: "checkbox", checked: domain.download_images,
    "aria-label": `Download images of ${domain.domain_name}`, disabled: !admin });
  const strategy = h("select", { "aria-label": `Proxy strategy of ${domain.domain_name}`,
    disabled: !admin },
  STRATEGIES.map((s) => h("option", { value: s, selected: s === domain.proxy_strategy }, s)));
  const stats = h("td", { class: "hide-narrow" },
    Object.entries(domain.task_counts || {}).map(([s, n]) => `${s} ${n}`).join(", "));
  const save = async () => {
    const changes = {
      crawl_delay_seconds: Number(delay.value),
      max_concurrent_requests: Number(concurrency.value),
      parser_name: parser.value.trim(),
      fetcher: fetcher.value,
      is_active: active.checked,
      ignore_robots: ignoreRobots.checked,
      download_images: images.checked,
      proxy_strategy: strategy.value,
    };
    try {
      await api("PATCH", `/api/domains/${domain.id}`, changes);
      toast(`${domain.domain_name} saved`);
      reload();
    } catch (error) { toast(errorText(error), "error"); }
  };
  const robots = async () => {
    try {
      const done = await api("POST", `/api/domains/${domain.id}/refresh-robots`);
      toast(done.robots_error ? `robots.txt: ${done.robots_error}` : "robots.txt refreshed");
    } catch (error) { toast(errorText(error), "error"); }
  };
  const more = async (event) => {
    const s = await api("GET", `/api/domains/${domain.id}/stats`);
    event.target.replaceWith(h("span", {}, `${s.total_tasks} tasks, ${s.products} products, `,
      `${s.attempts_last_24h.total} attempts in 24 h, avg fetch ${
        s.attempts_last_24h.avg_fetch_response_time_ms === null ? "—"
          : Math.round(s.attempts_last_24h.avg_fetch_response_time_ms)} ms, last completed `,
      time(s.last_completed_at)));
  };
  return h("tr", { "data-domain": domain.domain_name },
    h("td", {}, link(`/tasks?domain=${encodeURIComponent(domain.domain_name)}`,
      domain.domain_name), wait ? h("div", { class: "muted", "data-testid": "domain-wait",
      "data-reason": wait.reason }, wait.message) : null,
    admin ? shopperEditor(domain, reload) : null, sessionsView(domain)),
    h("td", {}, delay), h("td", {}, concurrency), h("td", {}, parser),
    h("td", {}, fetcher, autoFetcher(domain)),
    h("td", {}, active), h("td", {}, ignoreRobots), h("td", {}, images), h("td", {}, strategy),
    h("td", { class: "hide-narrow url" }, domain.robots_txt_url || "—", " ",
      admin ? h("button", { type: "button", onclick: robots }, "Refresh") : null),
    stats,
    h("td", {}, h("button", { type: "button", onclick: more }, "Stats"),
      link(`/domains/${domain.id}/parser`, "Selector parser"),
      admin ? h("button", { type: "button", class: "primary", onclick: save }, "Save") : null));
}

export async function render(view, _arg, current) {
  const p = params();
  const values = { q: p.get("q") || "" };
  const offset = Number(p.get("offset") || 0);
  const body = h("div", {});
  view.append(h("h1", {}, "Domains"),
    h("form", { class: "filters", role: "search", onsubmit: (event) => {
      event.preventDefault();
      go(`/domains${query(formValues(event.target))}`);
    } }, field("Name contains", h("input", { name: "q", value: values.q })),
    h("button", { type: "submit", class: "primary" }, "Filter")),
    body);
  const load = async () => {
    const [data, progress] = await Promise.all([
      api("GET", `/api/domains${query({ ...values, limit: 50, offset })}`),
      api("GET", "/api/progress")]);
    if (!current()) return;
    // Why each domain with work waits now (the domains with the most pending tasks).
    const waits = new Map(progress.domains.map((w) => [w.domain_id, w]));
    body.replaceChildren(table(["Domain", "Delay (s)", "Concurrency", "Parser", "Fetcher",
      "Active", "Ignore robots", "Images", "Proxy strategy", "robots.txt", "Tasks", ""],
    data.items.map((d) => editRow(d, load, waits.get(d.id))),
    { class: "stack", "aria-label": "Domains" }),
    pager(data, (o) => go(`/domains${query({ ...values, offset: o })}`)));
  };
  await load();
}
