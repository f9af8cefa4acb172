// A request profile editor (issue 33, docs/DASHBOARD.md): headers and cookies, one row each.
// A stored secret comes without its value (the API never sends it): its row shows it masked
// and, left empty, keeps it (sent as {name, secret: true}); a value typed in replaces it.

import { h } from "./lib.js";

const MASK = "•••••• stored secret (type to replace)";

function entryRow(kind, entry, label) {
  const stored = Boolean(entry && entry.secret);
  const name = h("input", { value: entry ? entry.name : "", size: 16, maxlength: 100,
    "aria-label": `${label} ${kind} name`, "data-part": "name" });
  const value = h("input", { value: entry && !stored ? entry.value || "" : "", size: 24,
    maxlength: 2048, type: stored ? "password" : "text", autocomplete: "off",
    placeholder: stored ? MASK : "value", "aria-label": `${label} ${kind} value`,
    "data-part": "value" });
  const secret = h("input", { type: "checkbox", checked: stored,
    "aria-label": `${label} ${kind} secret`, "data-part": "secret" });
  secret.addEventListener("change", () => { value.type = secret.checked ? "password" : "text"; });
  const row = h("div", { class: "row", "data-kind": kind, "data-stored-secret": stored },
    name, value, h("label", { class: "inline" }, secret, "secret"),
    h("button", { type: "button", onclick: () => row.remove() }, "Remove"));
  row.entry = () => {
    const given = { name: name.value.trim(), secret: secret.checked };
    if (stored && secret.checked && value.value === "") return given; // keep the stored one
    return { ...given, value: value.value };
  };
  return row;
}

// ``stored``: the public view of a profile (or null); ``label`` names the controls. Returns
// { element, value() } where value() is the profile to send ({headers, cookies}).
export function profileEditor(stored, label) {
  const lists = { header: h("div", {}), cookie: h("div", {}) };
  for (const entry of (stored && stored.headers) || []) {
    lists.header.append(entryRow("header", entry, label));
  }
  for (const entry of (stored && stored.cookies) || []) {
    lists.cookie.append(entryRow("cookie", entry, label));
  }
  const add = (kind) => h("button", { type: "button",
    onclick: () => lists[kind].append(entryRow(kind, null, label)) }, `Add ${kind}`);
  const element = h("div", { class: "profile", "data-testid": "profile-editor" },
    h("h3", {}, "Headers"), lists.header, add("header"),
    h("h3", {}, "Cookies"), lists.cookie, add("cookie"));
  const entries = (kind) => [...lists[kind].children].map((row) => row.entry())
    .filter((e) => e.name);
  return { element, value: () => ({ headers: entries("header"), cookies: entries("cookie") }) };
}
