// Proxies: pool health per domain and alerts, the proxy list with enable/disable/test,
// adding in bulk, and a domain's proxy mappings.

import {
  api, errorText, field, go, h, isAdmin, pager, params, query, table, time, toast,
} from "../lib.js";

function rate(success, failure) {
  const total = success + failure;
  return total ? `${((100 * success) / total).toFixed(1)} %` : "—";
}

function healthView(health) {
  const alerts = health.alerts.map((a) => h("p", { class: "alert" },
    `${a.domain_name}: ${a.message}`));
  const rows = health.domains.map((d) => h("tr", {}, h("td", {}, d.domain_name),
    h("td", { class: "num" }, `${d.active_proxies} / ${d.total_proxies}`),
    h("td", { class: "num" }, String(d.failing_proxies)),
    h("td", { class: "num" }, d.failure_rate_percent === null ? "—"
      : `${d.failure_rate_percent.toFixed(1)} %`),
    h("td", { class: "num" }, d.avg_response_time_ms === null ? "—"
      : `${Math.round(d.avg_response_time_ms)} ms`)));
  return [...alerts, rows.length ? table(["Domain", "Active / mapped", "Failing", "Failure rate",
    "Avg latency"], rows) : h("p", { class: "muted" }, "No domain has proxies mapped.")];
}

// Why a proxy is disabled; a re-test time is shown in the viewer's time zone.
function disabledReason(proxy) {
  if (!proxy.disabled_reason) return h("span", { class: "muted" }, "—");
  const [why, retest] = proxy.disabled_reason.split("; re-test at ");
  if (retest === undefined || !proxy.retest_at) return proxy.disabled_reason;
  return h("span", {}, `${why}; re-test at `, time(proxy.retest_at));
}

function proxyRow(proxy, reload, testUrl) {
  const admin = isAdmin();
  const toggle = async () => {
    try {
      await api("POST", `/api/proxies/${proxy.id}/${proxy.is_active ? "disable" : "enable"}`);
      reload();
    } catch (error) { toast(errorText(error), "error"); }
  };
  const test = async (event) => {
    const cell = event.target.parentElement;
    try {
      const r = await api("POST", `/api/proxies/${proxy.id}/test`, { url: testUrl() });
      toast(r.ok ? `Proxy #${proxy.id}: OK ${r.status_code} in ${r.response_time_ms} ms`
        : `Proxy #${proxy.id}: ${r.error_type}: ${r.error}`, r.ok ? "" : "error");
      cell.dataset.result = r.ok ? "ok" : "failed";
      reload();
    } catch (error) { toast(errorText(error), "error"); }
  };
  return h("tr", { "data-proxy-id": proxy.id },
    h("td", {}, String(proxy.id)),
    h("td", {}, `${proxy.proxy_protocol}://${proxy.proxy_url}:${proxy.proxy_port}`),
    h("td", {}, proxy.is_active ? "enabled" : "disabled"),
    h("td", { class: "num" }, rate(proxy.success_count, proxy.failure_count)),
    h("td", { class: "num" }, proxy.avg_response_time_ms === null ? "—"
      : `${proxy.avg_response_time_ms} ms`),
    h("td", { class: "hide-narrow" }, time(proxy.last_failure_at)),
    h("td", { "data-testid": "disabled-reason" }, disabledReason(proxy)),
    h("td", { class: "hide-narrow" }, proxy.provider || "—"),
    h("td", {}, admin ? h("button", { type: "button", onclick: toggle },
      proxy.is_active ? "Disable" : "Enable") : null,
    admin ? h("button", { type: "button", onclick: test }, "Test now") : null));
}

function bulkForm(reload) {
  const lines = h("textarea", { name: "lines", rows: 4,
    placeholder: "http://user:pass@10.0.0.1:8080\nsocks5://10.0.0.2:1080" });
  const out = h("div", {});
  return h("form", { onsubmit: async (event) => {
    event.preventDefault();
    try {
      const r = await api("POST", "/api/proxies/bulk", { lines: lines.value });
      out.replaceChildren(h("p", {}, `${r.created} added, ${r.duplicate} duplicate, `
        + `${r.invalid} invalid`), h("ul", {}, r.results.filter((x) => x.error)
        .map((x) => h("li", {}, `${x.input}: ${x.error}`))));
      lines.value = "";
      reload();
    } catch (error) { toast(errorText(error), "error"); }
  } }, field("Add proxies, one URL per line", lines),
  h("button", { type: "submit", class: "primary" }, "Add"), out);
}

async function mappingsView(container) {
  const domains = await api("GET", "/api/domains?limit=500");
  const list = h("div", {});
  const pick = h("select", { "aria-label": "Domain", onchange: () => show() },
    h("option", { value: "" }, "choose a domain"),
    domains.items.map((d) => h("option", { value: d.id }, d.domain_name)));
  const ids = h("input", { placeholder: "proxy ids, e.g. 1,2,3", "aria-label": "Proxy ids" });
  async function show() {
    if (!pick.value) { list.replaceChildren(); return; }
    const rows = await api("GET", `/api/domains/${pick.value}/proxies`);
    const items = Array.isArray(rows) ? rows : rows.items || [];
    list.replaceChildren(items.length ? table(["Proxy", "Active", "Priority", "Success rate",
      "Avg latency", ""], items.map((m) => h("tr", {},
      h("td", {}, `#${m.proxy_id} ${m.proxy_url}:${m.proxy_port}`),
      h("td", {}, m.is_active ? "yes" : "no"), h("td", {}, String(m.priority)),
      h("td", {}, rate(m.success_count, m.failure_count)),
      h("td", {}, m.avg_response_time_ms === null ? "—" : `${m.avg_response_time_ms} ms`),
      h("td", {}, isAdmin() ? h("button", { type: "button", onclick: async () => {
        try {
          await api("POST", `/api/domains/${pick.value}/proxies/${m.proxy_id}/${m.is_active
            ? "disable" : "enable"}`);
          show();
        } catch (error) { toast(errorText(error), "error"); }
      } }, m.is_active ? "Disable" : "Enable") : null))))
      : h("p", { class: "muted" }, "No proxies mapped."));
  }
  const assign = async () => {
    const proxyIds = ids.value.split(/[\s,]+/).filter(Boolean).map(Number);
    try {
      const r = await api("POST", `/api/domains/${pick.value}/proxies`, { proxy_ids: proxyIds });
      toast(`${r.assigned.length} assigned, ${r.already.length} already, `
        + `${r.unknown.length} unknown`);
      show();
    } catch (error) { toast(errorText(error), "error"); }
  };
  container.replaceChildren(h("div", { class: "row" }, field("Domain", pick),
    isAdmin() ? field("Assign proxies", ids) : null,
    isAdmin() ? h("button", { type: "button", onclick: assign }, "Assign") : null), list);
}

export async function render(view, _arg, current) {
  const offset = Number(params().get("offset") || 0);
  const health = h("div", {});
  const list = h("div", {});
  const mappings = h("div", {});
  const testUrl = h("input", { value: `${location.origin}/health`, size: 30,
    "aria-label": "URL to test proxies with" });
  view.append(h("h1", {}, "Proxies"), h("h2", {}, "Pool health"), health,
    h("h2", {}, "Proxies"),
    isAdmin() ? h("div", { class: "row" }, field("Test URL", testUrl)) : null, list,
    isAdmin() ? bulkForm(() => load()) : null,
    h("h2", {}, "Domain mappings"), mappings);
  async function load() {
    const [pool, data] = await Promise.all([api("GET", "/api/proxies/health"),
      api("GET", `/api/proxies${query({ limit: 50, offset })}`)]);
    if (!current()) return;
    health.replaceChildren(...healthView(pool));
    list.replaceChildren(data.items.length ? table(["#", "Proxy", "State", "Success rate",
      "EWMA latency", "Last failure", "Disabled reason", "Provider", ""],
    data.items.map((p) => proxyRow(p, load, () => testUrl.value)),
    { class: "stack", "aria-label": "Proxies" })
      : h("p", { class: "muted" }, "No proxies."),
    pager(data, (o) => go(`/proxies${query({ offset: o })}`)));
  }
  await load();
  await mappingsView(mappings);
}
