// Small helpers shared by every page: API calls, DOM building, times, charts, dialogs.

export const session = { who: null, onUnauthorized: () => {} };

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

export function isAdmin() {
  return session.who !== null && session.who.role === "admin";
}

// Calls the server's own API with the session cookie; changes carry the CSRF token.
export async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  const options = { method, headers, credentials: "same-origin" };
  if (method !== "GET") headers["X-CSRF-Token"] = session.who ? session.who.csrf_token : "";
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  let data = null;
  if (response.status !== 204) data = await response.json().catch(() => null);
  if (response.status === 401 && !path.startsWith("/ui/login")) session.onUnauthorized();
  if (!response.ok) {
    const detail = data && data.detail ? data.detail : response.statusText;
    throw new ApiError(response.status, detail, data);
  }
  return data;
}

// h("a", {href: "/x", class: "y", onclick: fn}, "text", child) builds an element.
export function h(tag, attrs, ...children) {
  const svg = ["svg", "rect", "line", "polyline", "circle", "text", "g", "title"].includes(tag);
  const el = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag)
    : document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "text") el.textContent = value;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function link(href, text, attrs) {
  return h("a", { href, "data-link": true, ...(attrs || {}) }, text);
}

// Times are sent in UTC and shown in the viewer's own time zone.
export function time(iso) {
  if (!iso) return h("span", { class: "muted" }, "—");
  const date = new Date(iso);
  return h("time", { datetime: iso, title: iso }, date.toLocaleString());
}

export function statusBadge(status) {
  return h("span", { class: `status ${status}`, "data-status": status }, status);
}

export function toast(message, kind) {
  const box = document.getElementById("toasts");
  const item = h("div", { class: `toast ${kind || ""}` }, message);
  box.append(item);
  setTimeout(() => item.remove(), kind === "error" ? 8000 : 4000);
}

// Asks before an action; the buttons name what each does ("Cancel 3 tasks" / "Keep them"),
// never a bare "Cancel" that could mean either.
export function confirmAction(message, ok, keep) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = message;
  document.getElementById("confirm-ok").textContent = ok;
  document.getElementById("confirm-keep").textContent = keep || "Go back";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
    document.getElementById("confirm-ok").focus();
  });
}

// "1 change", "3 changes" (many: the plural when adding "s" is wrong).
export function plural(count, one, many) {
  return `${count} ${count === 1 ? one : (many || `${one}s`)}`;
}

export function params() {
  return new URLSearchParams(location.search);
}

export function query(values) {
  const out = new URLSearchParams();
  for (const [key, value] of Object.entries(values)) {
    if (value !== null && value !== undefined && value !== "") out.set(key, value);
  }
  const text = out.toString();
  return text ? `?${text}` : "";
}

// The values of a filter form, as an object of non-empty strings.
export function formValues(form) {
  const values = {};
  for (const [key, value] of new FormData(form).entries()) {
    if (typeof value === "string" && value.trim() !== "") values[key] = value.trim();
  }
  return values;
}

let fields = 0;

// A labelled control: <label for> names only the control, never its options' text.
export function field(label, input) {
  if (!input.id) { fields += 1; input.id = `field-${fields}`; }
  return h("div", { class: "field" }, h("label", { for: input.id }, label), input);
}

export function select(name, options, current, attrs) {
  return h("select", { name, ...(attrs || {}) },
    options.map(([value, text]) => h("option", { value, selected: value === current }, text)));
}

// A total that is not exact (a broad product search) is a lower bound: "of 10000+", and the
// next page is offered while pages come back full.
export function pager(pageData, go) {
  const { total, limit, offset, items } = pageData;
  if (!items.length && offset === 0) return null; // nothing at all: no "← Previous none Next →"
  const exact = pageData.total_exact !== false;
  const last = exact ? Math.min(offset + limit, total) : offset + items.length;
  const more = exact ? last < total : items.length === limit;
  const of = exact ? `${total}` : `${total}+`;
  return h("nav", { class: "pager", "aria-label": "Pages" },
    h("button", { type: "button", disabled: offset === 0,
      onclick: () => go(Math.max(0, offset - limit)) }, "← Previous"),
    h("span", { "data-testid": "page-info" }, total ? `${offset + 1}–${last} of ${of}` : "none"),
    h("button", { type: "button", disabled: !more, onclick: () => go(offset + limit) },
      "Next →"));
}

// A column header that sorts the list when clicked; the server orders it (sort=key, or -key
// for highest / newest first, the first click's order). ``current`` is the sort in force.
export function sortHeader(label, key, current, sortBy) {
  const [asc, desc] = [current === key, current === `-${key}`];
  const button = h("button", { type: "button", class: "sort", "data-sort": key,
    title: `Sort by ${label.toLowerCase()}`, onclick: () => sortBy(desc ? key : `-${key}`) },
  label, asc ? " ▲" : desc ? " ▼" : "");
  button.dataset.sorted = asc ? "ascending" : desc ? "descending" : "none";
  return button;
}

function header(x) {
  if (!(x instanceof Node)) return h("th", { scope: "col" }, x);
  const sorted = x.dataset ? x.dataset.sorted : undefined;
  return h("th", { scope: "col", "aria-sort": sorted || null }, x);
}

// attrs.class "stack" turns rows into labelled blocks on a phone (wide editable rows).
export function table(headers, rows, attrs) {
  const el = h("table", attrs || {},
    h("thead", {}, h("tr", {}, headers.map(header))),
    h("tbody", {}, rows));
  if (el.classList.contains("stack")) {
    for (const tr of el.tBodies[0].rows) {
      [...tr.cells].forEach((td, i) => {
        if (typeof headers[i] === "string") td.dataset.label = headers[i];
      });
    }
  }
  return h("div", { class: "table-wrap" }, el);
}

// Bars of equal width; values is a list of numbers, labels one per bar (for titles).
export function barChart(values, labels, caption) {
  const width = 600; const height = 160; const pad = 24;
  const max = Math.max(1, ...values);
  const step = (width - pad) / values.length;
  const svg = h("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": caption });
  svg.append(h("line", { class: "axis", x1: pad, y1: height - pad, x2: width, y2: height - pad }));
  svg.append(h("text", { x: 0, y: 12 }, String(max)));
  svg.append(h("text", { x: 0, y: height - pad }, "0"));
  values.forEach((value, i) => {
    const barHeight = ((height - 2 * pad) * value) / max;
    svg.append(h("rect", { class: "bar", x: pad + i * step + 1, y: height - pad - barHeight,
      width: Math.max(1, step - 2), height: barHeight }, h("title", {}, `${labels[i]}: ${value}`)));
  });
  svg.append(h("text", { x: pad, y: height - 6 }, labels[0] || ""));
  // Anchored at its end: a longer label ("06:21 PM") grows leftwards, never past the edge.
  svg.append(h("text", { x: width - 2, y: height - 6, "text-anchor": "end" },
    labels[labels.length - 1] || ""));
  return svg;
}

// A line over time; points are [Date, number].
export function lineChart(points, caption) {
  const width = 600; const height = 200; const pad = 40;
  const svg = h("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": caption, "data-points": points.length });
  if (points.length === 0) return svg;
  const xs = points.map((p) => p[0].getTime());
  const ys = points.map((p) => p[1]);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (y0 === y1) { y0 -= 1; y1 += 1; }
  const px = (x) => pad + ((width - 2 * pad) * (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0)));
  const py = (y) => height - pad - ((height - 2 * pad) * (y - y0)) / (y1 - y0);
  svg.append(h("line", { class: "axis", x1: pad, y1: height - pad, x2: width - pad,
    y2: height - pad }));
  svg.append(h("text", { x: 2, y: pad }, y1.toFixed(2)));
  svg.append(h("text", { x: 2, y: height - pad }, y0.toFixed(2)));
  svg.append(h("text", { x: pad, y: height - 10 }, new Date(x0).toLocaleDateString()));
  svg.append(h("text", { x: width - pad, y: height - 10, "text-anchor": "end" },
    new Date(x1).toLocaleDateString()));
  svg.append(h("polyline", { class: "line",
    points: points.map((p) => `${px(p[0].getTime())},${py(p[1])}`).join(" ") }));
  for (const [when, value] of points) {
    svg.append(h("circle", { class: "dot", cx: px(when.getTime()), cy: py(value), r: 3 },
      h("title", {}, `${when.toLocaleString()}: ${value}`)));
  }
  return svg;
}

export function errorText(error) {
  return error instanceof ApiError ? `${error.status}: ${error.message}` : String(error);
}

// Moves to another dashboard URL without reloading (set up by app.js).
export function go(url, replace) {
  session.navigate(url, replace);
}

// A link to a page outside the dashboard; anything but http(s) (javascript:, data:) is text.
export function outLink(url) {
  if (!/^https?:\/\//i.test(url || "")) return h("span", {}, url || "—");
  return h("a", { href: url, rel: "noreferrer noopener", target: "_blank" }, url);
}

// "Export this filter: CSV · JSONL" for an API collection (`/api/products`) and its filter.
export function exportLinks(collection, values) {
  const name = collection.split("/").pop();
  const one = (ext, label) => h("a", { href: `${collection}/export.${ext}${query(values)}`,
    download: `${name}.${ext}` }, label);
  return h("p", {}, "Export this filter: ", one("csv", "CSV"), " · ", one("jsonl", "JSONL"));
}
