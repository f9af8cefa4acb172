// A domain's selector parser: edit the map (JSON), preview it live on a stored page of the
// domain — the product's fields and the items (ads, listings) its item extractors read —,
// save it as a new version, use an older one, reparse the stored pages.

import { api, errorText, field, h, isAdmin, link, table, time, toast } from "../lib.js";

const TEMPLATE = {
  product_name: { css: "h1" },
  price: { css: ".price", post: ["price"] },
};
// Items: one per block "each" matches; fields are read inside the block ({} = the block).
const LISTING = {
  kind: "ad",
  each: { css: ".ad" },
  key: "url",
  fields: {
    url: { css: "a", attr: "href" },
    title: { css: "h2" },
    price: { css: ".price", post: ["price"] },
  },
};
const PREVIEW_DELAY_MS = 300;

function shown(value) {
  if (value === null || value === undefined) return "—";
  return Array.isArray(value) ? value.join("\n") : String(value);
}

function itemsPreview(spec, index, data) {
  const mine = data.items.filter((item) => item.kind === spec.kind);
  const names = Object.keys(spec.fields || {});
  const problems = Object.entries(data.errors).filter(([k]) => k.startsWith(`items.${index}.`));
  return h("section", { "data-items": index },
    h("h3", {}, `Items "${spec.kind}": ${mine.length} found`),
    problems.length ? h("ul", { class: "muted" }, problems.map(([k, v]) => h("li", {}, `${k}: ${v}`))) : null,
    table(["Key", ...names], mine.map((item) => h("tr", { "data-key": item.key },
      h("td", {}, item.key), ...names.map((name) => h("td", { class: "value" },
        shown(item.data[name]))))), { "aria-label": `Items ${spec.kind}` }));
}

export async function render(view, domainId, current) {
  const domain = await api("GET", `/api/domains/${domainId}`);
  const [versions, pages] = await Promise.all([
    api("GET", `/api/domains/${domainId}/selector-parsers?limit=50`),
    api("GET", `/api/domains/${domainId}/stored-pages?limit=50`),
  ]);
  if (!current()) return;
  document.title = `Selector parser · ${domain.domain_name} · Forager`;
  const inUse = versions.items.find((v) => v.in_use) || versions.items[0];
  const rules = h("textarea", { rows: 14, spellcheck: "false" });
  rules.value = JSON.stringify(inUse ? inUse.fields : TEMPLATE, null, 2);
  const page = h("select", {}, pages.items.map((p) => h("option", { value: p.task_id },
    `#${p.task_id} ${p.url}`)));
  const problem = h("p", { role: "alert", class: "alert", hidden: true });
  const result = h("div", { "aria-live": "polite" });
  const note = h("input", { maxlength: 500, size: 40 });
  const history = h("div", {});

  let timer = null;
  let asked = 0;
  const fields = () => {
    try {
      return JSON.parse(rules.value);
    } catch (error) {
      throw new Error(`The rules are not JSON: ${error.message}`);
    }
  };
  const say = (message) => { problem.textContent = message; problem.hidden = !message; };
  const preview = async () => {
    asked += 1;
    const mine = asked;
    if (!page.value) { say("No stored page of this domain yet: crawl one first."); return; }
    try {
      const body = { fields: fields(), task_id: Number(page.value) };
      const data = await api("POST", `/api/domains/${domainId}/selector-parsers/preview`, body);
      if (mine !== asked || !current()) return;
      say(data.error || "");
      const names = Object.keys(body.fields).filter((name) => name !== "items");
      const specs = Array.isArray(body.fields.items) ? body.fields.items : [];
      result.replaceChildren(
        names.length ? table(["Field", "Value", "Problem"], names.map((name) => h("tr",
          { "data-field": name }, h("td", {}, name), h("td", { class: "value" }, shown(data.values[name])),
          h("td", { class: "muted" }, data.errors[name] || ""))), { "aria-label": "Preview" }) : null,
        ...specs.map((spec, index) => itemsPreview(spec, index, data)));
    } catch (error) {
      if (mine !== asked) return;
      const errors = error.body && error.body.errors;
      say(errors ? errors.map((e) => e.message).join("; ") : errorText(error));
      result.replaceChildren();
    }
  };
  const soon = () => { clearTimeout(timer); timer = setTimeout(preview, PREVIEW_DELAY_MS); };
  rules.addEventListener("input", soon);
  page.addEventListener("change", preview);

  const drawHistory = (data) => history.replaceChildren(table(["Version", "Note", "Saved", "In use", ""],
    data.items.map((v) => h("tr", { "data-version": v.version }, h("td", {}, `v${v.version}`),
      h("td", {}, v.note || ""), h("td", {}, time(v.created_at)), h("td", {}, v.in_use ? "yes" : ""),
      h("td", {}, h("button", { type: "button", onclick: () => { rules.value = JSON.stringify(v.fields, null, 2); preview(); } }, "Load"),
        isAdmin() && !v.in_use ? h("button", { type: "button", onclick: () => use(v.version) }, "Use") : null))),
    { "aria-label": "Versions" }));
  const reload = async () => drawHistory(await api("GET", `/api/domains/${domainId}/selector-parsers?limit=50`));
  const use = async (version) => {
    try {
      await api("POST", `/api/domains/${domainId}/selector-parsers/${version}/use`);
      toast(`Version ${version} in use`);
      await reload();
    } catch (error) { toast(errorText(error), "error"); }
  };
  const save = async () => {
    try {
      const body = { fields: fields() };
      if (note.value.trim()) body.note = note.value.trim();
      const saved = await api("POST", `/api/domains/${domainId}/selector-parsers`, body);
      toast(`Saved version ${saved.version}; new pages are parsed with it`);
      note.value = "";
      await reload();
    } catch (error) {
      const errors = error.body && error.body.errors;
      say(errors ? errors.map((e) => e.message).join("; ") : errorText(error));
    }
  };
  const addListing = () => {
    let map;
    try { map = fields(); } catch (error) { say(error.message); return; }
    map.items = [...(Array.isArray(map.items) ? map.items : []), LISTING];
    rules.value = JSON.stringify(map, null, 2);
    preview();
  };
  const reparse = async () => {
    try {
      const done = await api("POST", "/api/tasks/restart-parsing", { domain_id: domainId, outdated: true });
      toast(`${done.restarted} stored page(s) queued to be parsed again (no refetch)`);
    } catch (error) { toast(errorText(error), "error"); }
  };

  view.append(
    h("h1", {}, `Selector parser · ${domain.domain_name}`),
    h("p", { class: "muted" }, "Map product fields to CSS, XPath or JSON-LD rules, and list items ",
      "(ads, listings: one per block) under \"items\"; the preview runs on the ",
      "chosen stored page as you type. See docs/PARSERS.md. ",
      link(`/tasks?domain=${encodeURIComponent(domain.domain_name)}`, "The domain's tasks")),
    h("div", { class: "card" }, field("Stored page", page), field("Rules (JSON)", rules),
      h("p", {}, h("button", { type: "button", onclick: addListing }, "Add an item extractor (ads, listings)")),
      problem,
      isAdmin() ? h("p", {}, field("Note", note),
        h("button", { type: "button", class: "primary", onclick: save }, "Save as new version"), " ",
        h("button", { type: "button", onclick: reparse }, "Reparse stored pages")) : null),
    h("h2", {}, "Preview"), result,
    h("h2", {}, "Versions"), history);
  drawHistory(versions);
  await preview();
}
