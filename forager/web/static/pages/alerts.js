// Alerts (issue 17): rules (subscriptions) with their target masked, a webhook's signing secret
// shown once at creation; the deliveries with their tries, re-sent with one click.
// Redrawn from the API every few seconds while the page is shown and no tries are open.

import {
  api, confirmAction, errorText, field, h, isAdmin, link, query, select, statusBadge, table, time,
  toast,
} from "../lib.js";

const KINDS = [
  ["price_drop", "Price dropped by %"], ["price_rise", "Price rose by %"],
  ["price_below", "Price below threshold"], ["price_above", "Price above threshold"],
  ["back_in_stock", "Back in stock"], ["out_of_stock", "Out of stock"],
  ["task_failed", "Task failed"], ["breaker_opened", "Domain breaker opened"],
  ["agent_blocked", "Agent blocked"], ["mission_finished", "Mission finished"],
  ["mission_failed", "Mission failed"], ["monitor_changed", "Monitor value or state changed"],
  ["budget_exhausted", "Crawl job budget exhausted"],
  ["proxies_low", "Active proxies below threshold"],
  ["failure_rate_high", "Failure rate ≥ % over the window"],
  ["parse_rate_low", "Parse success rate < % over the window"],
  ["monitor_stale", "Monitor stale for the window"],
  ["monitor_failing", "Monitor failing (polls in a row)"],
];
const THRESHOLD = ["price_below", "price_above", "proxies_low"];
const WINDOW = ["failure_rate_high", "parse_rate_low", "monitor_stale"];
const PRICE = ["price_drop", "price_rise", "price_below", "price_above"];
const PRODUCT = [...PRICE, "back_in_stock", "out_of_stock"];
const REFRESH_MS = 3000;
let opened = 0; // deliveries whose tries are shown: no redraw meanwhile
let domainNames = new Map(); // domain id -> name, for the rules' scope

// A product picked by name or SKU: the list offers the matches as "name (#id)".
function productPicker() {
  const options = h("datalist", { id: "alert-products" });
  const input = h("input", { name: "product", list: "alert-products", autocomplete: "off",
    placeholder: "type a name or SKU", size: 28 });
  let asked = "";
  input.addEventListener("input", async () => {
    const text = input.value.trim();
    if (text.length < 2 || /\(#\d+\)$/.test(text) || text === asked) return;
    asked = text;
    try {
      const found = await api("GET", `/api/products${query({ q: text, limit: 10 })}`);
      if (asked !== text) return;
      options.replaceChildren(...found.items.map((p) => h("option", {
        value: `${p.product_name || p.url} (#${p.id})` })));
    } catch { /* the list stays as it was */ }
  });
  const chosen = () => {
    const text = input.value.trim();
    if (!text) return null;
    const match = /\(#(\d+)\)$/.exec(text);
    if (!match) throw new Error(`pick the product from the list (matches of "${text}")`);
    return Number(match[1]);
  };
  return { list: options, input, chosen };
}

function secretNotice(rule) {
  return h("div", { class: "alert", role: "status", "data-testid": "alert-secret" },
    h("p", {}, `Signing secret of "${rule.name}", shown only now; the receiver checks `
      + "X-Forager-Signature with it:"), h("code", {}, rule.secret));
}

function createForm(notice, reload) {
  const input = (name, attrs) => h("input", { name, ...attrs });
  const name = input("name", { required: true, maxlength: 100 });
  const kind = select("kind", KINDS, "price_below");
  const amount = input("amount", { type: "number", min: 0, step: "0.01",
    placeholder: "threshold, or % for a drop / rise / rate" });
  const windowSeconds = input("window_seconds", { type: "number", min: 10, step: 1,
    placeholder: "600" });
  const noise = input("min_change_abs", { type: "number", min: 0, step: "0.01",
    placeholder: "0.05" });
  const first = input("fire_on_first", { type: "checkbox" });
  const domain = select("domain_id", [["", "any domain"],
    ...[...domainNames].map(([id, name]) => [String(id), name])], "");
  const product = productPicker();
  const batch = input("batch_name", { maxlength: 255 });
  const tag = input("tag", { maxlength: 50, pattern: "[a-z0-9][a-z0-9_.:\\-]{0,49}",
    placeholder: "kettles" });
  const channel = select("channel", [["webhook_url", "Webhook"], ["apprise_url", "Apprise"]],
    "webhook_url");
  const target = input("target", { required: true, maxlength: 2000,
    placeholder: "https://hooks.example.com/forager or mailto://user:pass@host?to=…" });
  return h("form", { class: "card", "aria-label": "New alert rule", onsubmit: async (event) => {
    event.preventDefault();
    const body = { name: name.value.trim(), kind: kind.value };
    body[channel.value] = target.value.trim();
    if (amount.value) {
      if (THRESHOLD.includes(kind.value)) body.threshold = amount.value;
      else body.percent = Number(amount.value);
    }
    if (windowSeconds.value && WINDOW.includes(kind.value)) {
      body.window_seconds = Number(windowSeconds.value);
    }
    if (noise.value) body.min_change_abs = noise.value;
    if (first.checked) body.fire_on_first = true;
    if (domain.value) body.domain_id = Number(domain.value);
    try {
      const productId = product.chosen();
      if (productId) body.product_id = productId;
    } catch (error) { toast(error.message, "error"); return; }
    if (batch.value.trim()) body.batch_name = batch.value.trim();
    if (tag.value.trim()) body.tag = tag.value.trim();
    try {
      const rule = await api("POST", "/api/alerts/rules", body);
      notice.replaceChildren(rule.secret ? secretNotice(rule) : "");
      toast(`Alert rule ${rule.id} created`);
      event.target.reset();
      reload();
    } catch (error) { toast(errorText(error), "error"); }
  } },
  h("div", { class: "row" }, field("Name", name), field("When", kind), field("Amount", amount),
    field("Window (s)", windowSeconds),
    field("Ignore moves under", noise), field("Fire on first sight", first)),
  h("div", { class: "row" }, field("Domain", domain), field("Product", product.input),
    product.list,
    field("Batch", batch), field("Product tag", tag)),
  h("div", { class: "row" }, field("Send by", channel), field("Target URL", target)),
  h("button", { type: "submit", class: "primary" }, "Create rule"));
}

function condition(rule) {
  const parts = [];
  if (rule.threshold !== null) parts.push(`threshold ${rule.threshold}`);
  if (rule.percent !== null) parts.push(`≥ ${rule.percent} %`);
  if (rule.min_change_abs !== null) parts.push(`moves ≥ ${rule.min_change_abs}`);
  if (rule.min_change_pct !== null) parts.push(`moves ≥ ${rule.min_change_pct} %`);
  if (rule.fire_on_first) parts.push("first sight too");
  if (rule.window_seconds !== null && rule.window_seconds !== undefined) {
    parts.push(`over ${rule.window_seconds} s`);
  }
  if (rule.min_attempts) parts.push(`at least ${rule.min_attempts}`);
  if (rule.monitor_id) parts.push(`monitor #${rule.monitor_id}`);
  if (rule.job_id) parts.push(`crawl job #${rule.job_id}`);
  const scope = [rule.domain_id && `domain ${domainNames.get(rule.domain_id) || rule.domain_id}`,
    rule.batch_name && `batch ${rule.batch_name}`, rule.tag && `tag ${rule.tag}`];
  const text = [...parts, ...scope.filter(Boolean)].join(", ");
  if (rule.product_id) {
    return [text ? `${text}, ` : "", link(`/products/${rule.product_id}`,
      `product #${rule.product_id}`)];
  }
  return text || (PRODUCT.includes(rule.kind) ? "any product" : "any");
}

function ruleRow(rule, reload) {
  const admin = isAdmin();
  const toggle = async () => {
    try {
      await api("PATCH", `/api/alerts/rules/${rule.id}`, { enabled: !rule.enabled });
      reload();
    } catch (error) { toast(errorText(error), "error"); }
  };
  const remove = async () => {
    if (!(await confirmAction(`Delete the rule "${rule.name}" and its deliveries?`,
      "Delete the rule", "Keep it"))) return;
    try { await api("DELETE", `/api/alerts/rules/${rule.id}`); reload(); }
    catch (error) { toast(errorText(error), "error"); }
  };
  return h("tr", { "data-rule": rule.name },
    h("td", {}, rule.name), h("td", {}, rule.kind), h("td", {}, condition(rule)),
    h("td", {}, `${rule.channel}: ${rule.target}`),
    h("td", {}, rule.enabled ? "on" : "off"),
    h("td", {}, admin ? [
      h("button", { type: "button", onclick: toggle }, rule.enabled ? "Disable" : "Enable"),
      h("button", { type: "button", onclick: remove }, "Delete")] : null));
}

function deliveryRow(delivery, reload) {
  const history = h("td", { colspan: 7 });
  const detailRow = h("tr", { hidden: true }, history);
  const show = async () => {
    if (!detailRow.hidden) { detailRow.hidden = true; opened -= 1; return; }
    try {
      const full = await api("GET", `/api/alerts/deliveries/${delivery.id}`);
      history.replaceChildren(full.history.length ? table(["Try at", "Took", "Code", "Error"],
        full.history.map((t) => h("tr", {}, h("td", {}, time(t.started_at)),
          h("td", { class: "num" }, `${t.duration_ms} ms`),
          h("td", { class: "num" }, t.status_code === null ? "—" : String(t.status_code)),
          h("td", {}, t.error || "")))) : h("p", { class: "muted" }, "Not tried yet."),
        h("pre", {}, JSON.stringify(full.payload, null, 2)));
      detailRow.hidden = false;
      opened += 1;
    } catch (error) { toast(errorText(error), "error"); }
  };
  const resend = async () => {
    try {
      await api("POST", `/api/alerts/deliveries/${delivery.id}/resend`);
      toast(`Delivery ${delivery.id} will be sent again`);
      reload();
    } catch (error) { toast(errorText(error), "error"); }
  };
  return [h("tr", { "data-delivery": String(delivery.id) },
    h("td", { class: "num" }, String(delivery.id)), h("td", {}, delivery.event),
    h("td", {}, `${delivery.subject_type} ${delivery.subject_id}`),
    h("td", {}, statusBadge(delivery.status)),
    h("td", { class: "num" }, String(delivery.attempts)),
    h("td", {}, delivery.last_status_code === null ? (delivery.last_error || "—")
      : `${delivery.last_status_code}${delivery.last_error ? ` (${delivery.last_error})` : ""}`),
    h("td", {}, time(delivery.created_at), " ",
      h("button", { type: "button", onclick: show }, "Tries"),
      isAdmin() ? h("button", { type: "button", onclick: resend }, "Re-send") : null)),
  detailRow];
}

export async function render(view, _arg, current) {
  const notice = h("div", {});
  const rules = h("div", {});
  const deliveries = h("div", {});
  const reload = async () => {
    opened = 0;
    try {
      const [r, d] = await Promise.all([api("GET", "/api/alerts/rules?limit=200"),
        api("GET", "/api/alerts/deliveries?limit=100")]);
      rules.replaceChildren(r.items.length ? table(["Rule", "When", "Condition / scope",
        "Target", "State", ""], r.items.map((rule) => ruleRow(rule, reload)))
        : h("p", { class: "muted" }, "No alert rules."));
      deliveries.replaceChildren(d.items.length ? table(["#", "Event", "About", "Status",
        "Tries", "Last answer", "Queued"], d.items.flatMap((x) => deliveryRow(x, reload)))
        : h("p", { class: "muted" }, "Nothing sent yet."));
    } catch (error) { toast(errorText(error), "error"); }
  };
  view.append(h("h1", {}, "Alerts"), notice);
  try {
    const domains = await api("GET", "/api/domains?limit=200");
    domainNames = new Map(domains.items.map((d) => [d.id, d.domain_name]));
  } catch (error) { toast(errorText(error), "error"); }
  if (!current()) return;
  if (isAdmin()) view.append(createForm(notice, reload));
  view.append(h("h2", {}, "Rules"), rules, h("h2", {}, "Deliveries"), deliveries);
  await reload();
  const timer = setInterval(() => {
    if (!current()) clearInterval(timer);
    else if (!opened) reload();
  }, REFRESH_MS);
}
