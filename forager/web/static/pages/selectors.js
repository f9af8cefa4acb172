// A domain's selector parser: edit the map (JSON), preview it live on a stored page of the
// domain — the product's fields and the items (ads, listings) its item extractors read —,
// compare it field by field with the parser in use on the newest stored pages, save it as a
// new version (asking first when it loses fields), use an older one, reparse the stored pages.

import {
  api, confirmAction, errorText, field, h, isAdmin, link, plural, table, time, toast,
} from "../lib.js";

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
const COMPARE_DELAY_MS = 800; // twenty pages read twice: once the typing has settled

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

function comparedWith(data) {
  return data.current_version ? `selector map v${data.current_version}` : `the ${data.current_parser} parser`;
}

function pageComparison(page) {
  const counts = {};
  for (const diff of page.fields) counts[diff.verdict] = (counts[diff.verdict] || 0) + 1;
  const said = ["added", "changed", "lost"].filter((v) => counts[v]).map((v) => `${counts[v]} ${v}`);
  const errors = [["in use", page.current_error], ["new map", page.candidate_error]]
    .filter(([, error]) => error).map(([who, error]) => h("p", { class: "muted" }, `${who}: ${error}`));
  return h("details", { "data-task": page.task_id },
    h("summary", {}, `#${page.task_id} ${page.url} — ${said.join(", ") || "no difference"}`),
    ...errors,
    table(["Field", "In use", "New map", ""], page.fields.map((diff) => h("tr",
      { "data-field": diff.field, "data-verdict": diff.verdict }, h("td", {}, diff.field),
      h("td", { class: "value" }, shown(diff.current)), h("td", { class: "value" }, shown(diff.candidate)),
      h("td", {}, diff.verdict))), { "aria-label": `Page ${page.task_id}` }));
}

function comparisonView(data) {
  if (!data.pages.length) return [h("p", { class: "muted" }, "No stored page of this domain yet: nothing to compare.")];
  const lost = data.lost.length
    ? h("p", { class: "alert", "data-testid": "lost-fields" },
      `Loses ${data.lost.join(", ")} on some pages: add rules for them, or let them fall back to the generic parser.`)
    : h("p", {}, "Loses no field.");
  return [
    h("p", { class: "muted" }, `Against ${comparedWith(data)} on the ${plural(data.pages.length, "newest stored page")}.`),
    lost,
    table(["Field", "Adds", "Changes", "Loses", "Same"], data.fields.map((f) => h("tr",
      { "data-compare-field": f.field }, h("td", {}, f.field),
      h("td", {}, String(f.added)), h("td", {}, String(f.changed)), h("td", {}, String(f.lost)),
      h("td", {}, String(f.same)))), { "aria-label": "Comparison" }),
    ...data.pages.map(pageComparison),
  ];
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
  const compared = h("div", { "aria-live": "polite" });

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
  // The comparison of the rules as they are now (text, answer), for Save to read.
  let comparison = null;
  let compareTimer = null;
  const compare = async () => {
    const text = rules.value;
    let body;
    try { body = { fields: fields() }; } catch (error) { return null; }
    try {
      const data = await api("POST", `/api/domains/${domainId}/selector-parsers/compare`, body);
      if (!current()) return null;
      if (rules.value === text) {
        comparison = { text, data };
        compared.replaceChildren(...comparisonView(data));
      }
      return data;
    } catch (error) {
      if (rules.value === text) compared.replaceChildren(h("p", { class: "muted" }, `Not compared: ${errorText(error)}`));
      return null;
    }
  };
  const soon = () => {
    clearTimeout(timer); timer = setTimeout(preview, PREVIEW_DELAY_MS);
    clearTimeout(compareTimer); compareTimer = setTimeout(compare, COMPARE_DELAY_MS);
  };
  rules.addEventListener("input", soon);
  page.addEventListener("change", preview);

  const drawHistory = (data) => history.replaceChildren(table(["Version", "Note", "Saved", "In use", ""],
    data.items.map((v) => h("tr", { "data-version": v.version }, h("td", {}, `v${v.version}`),
      h("td", {}, v.note || ""), h("td", {}, time(v.created_at)), h("td", {}, v.in_use ? "yes" : ""),
      h("td", {}, h("button", { type: "button", onclick: () => { rules.value = JSON.stringify(v.fields, null, 2); preview(); compare(); } }, "Load"),
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
      const checked = comparison && comparison.text === rules.value ? comparison.data : await compare();
      if (checked && checked.lost.length) {
        const sure = await confirmAction(`The new map loses ${checked.lost.join(", ")} on stored pages where ${comparedWith(checked)} reads them (see the comparison). Save it anyway?`,
          "Save and lose them", "Go back");
        if (!sure) return;
      }
      if (note.value.trim()) body.note = note.value.trim();
      const saved = await api("POST", `/api/domains/${domainId}/selector-parsers`, body);
      toast(`Saved version ${saved.version}; new pages are parsed with it`);
      note.value = "";
      await Promise.all([reload(), compare()]); // now against the version just saved
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
    compare();
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
      "chosen stored page as you type, and the comparison with the parser in use on the newest ",
      "stored pages. See docs/PARSERS.md. ",
      link(`/tasks?domain=${encodeURIComponent(domain.domain_name)}`, "The domain's tasks")),
    h("div", { class: "card" }, field("Stored page", page), field("Rules (JSON)", rules),
      h("p", {}, h("button", { type: "button", onclick: addListing }, "Add an item extractor (ads, listings)")),
      problem,
      isAdmin() ? h("p", {}, field("Note", note),
        h("button", { type: "button", class: "primary", onclick: save }, "Save as new version"), " ",
        h("button", { type: "button", onclick: reparse }, "Reparse stored pages")) : null),
    h("h2", {}, "Preview"), result,
    h("h2", {}, "Compared with the parser in use"),
    h("p", { class: "muted" }, "Per field, on how many of the newest stored pages the map adds, changes, ",
      "loses or keeps a value; fields without a rule come from the generic parser unless the map ",
      "says \"fallback\": false. Open a page for its values."),
    compared,
    h("h2", {}, "Versions"), history);
  drawHistory(versions);
  await Promise.all([preview(), compare()]);
}
