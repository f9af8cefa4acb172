// Products: search and filters (in the URL), price change arrows, export of the current
// filter; a product's page with its images and price history chart.

import {
  api, errorText, exportLinks, field, formValues, go, h, isAdmin, link, lineChart, outLink,
  pager, params, query, select, table, time, toast,
} from "../lib.js";

const FILTERS = ["q", "tag", "brand", "category", "domain", "min_price", "max_price",
  "currency", "is_available"];

function arrow(price, previous) {
  if (previous === undefined || previous === null || price === null) return "";
  const [now, before] = [Number(price), Number(previous)];
  if (now > before) return h("span", { class: "up", title: `was ${previous}` }, " ▲");
  if (now < before) return h("span", { class: "down", title: `was ${previous}` }, " ▼");
  return h("span", { class: "muted", title: "unchanged" }, " =");
}

export async function render(view, _arg, current) {
  const p = params();
  const values = Object.fromEntries(FILTERS.filter((k) => p.get(k)).map((k) => [k, p.get(k)]));
  const offset = Number(p.get("offset") || 0);
  const input = (name, label, attrs) => field(label, h("input", { name,
    value: values[name] || "", ...(attrs || {}) }));
  view.append(h("h1", {}, "Products"),
    h("form", { class: "filters", role: "search", "aria-label": "Search products",
      onsubmit: (event) => {
        event.preventDefault();
        go(`/products${query(formValues(event.target))}`);
      } },
    input("q", "Search", { type: "search", size: 24 }),
    input("tag", "Tag", { size: 10 }),
    input("brand", "Brand", { size: 10 }), input("category", "Category", { size: 10 }),
    input("domain", "Domain", { size: 12 }),
    input("min_price", "Price from", { type: "number", step: "0.01", min: 0 }),
    input("max_price", "to", { type: "number", step: "0.01", min: 0 }),
    input("currency", "Currency", { size: 3, maxlength: 3 }),
    field("Available", select("is_available", [["", "any"], ["true", "yes"], ["false", "no"]],
      values.is_available || "")),
    h("button", { type: "submit", class: "primary" }, "Search"),
    h("a", { href: "/products", "data-link": true }, "Clear")),
    exportLinks("/api/products", values));
  const data = await api("GET", `/api/products${query({ ...values, limit: 50, offset })}`);
  const ids = data.items.map((x) => x.id);
  const previous = ids.length
    ? (await api("GET", `/ui/products/previous-prices?ids=${ids.join(",")}`)).previous : {};
  if (!current()) return;
  view.append(table(["Product", "Price", "Brand", "Tags", "Available", "Updated"],
    data.items.map((x) => h("tr", { "data-product-id": x.id },
      h("td", {}, link(`/products/${x.id}`, x.product_name)),
      h("td", { class: "num" }, x.price === null ? "—" : `${x.price} ${x.currency || ""}`,
        arrow(x.price, previous[String(x.id)])),
      h("td", {}, x.brand || ""),
      h("td", {}, x.tags.map((t) => link(`/products${query({ tag: t })}`, t))
        .flatMap((a, i) => (i ? [" ", a] : [a]))),
      h("td", {}, x.is_available === null ? "?" : x.is_available ? "yes" : "no"),
      h("td", {}, time(x.updated_at)))), { "aria-label": "Products" }),
  pager(data, (o) => go(`/products${query({ ...values, offset: o })}`)));
}

// A product's images: the copies Forager stored (served by this server, so the page loads
// nothing from other sites) shown as pictures; the rest as links to the shop, with why a
// download failed.
function imageList(images) {
  if (!images.length) return h("p", { class: "muted" }, "No images.");
  return h("ul", { class: "images", "data-testid": "product-images" }, images.map((i) =>
    h("li", {},
      i.stored ? h("figure", {},
        h("img", { src: i.content_url, alt: i.alt_text || "", loading: "lazy",
          width: i.width, height: i.height, class: "stored-image" }),
        h("figcaption", { class: "muted" },
          `${i.width}×${i.height} ${i.content_type}, ${i.file_size} bytes · `, outLink(i.image_url)))
        : h("span", {}, outLink(i.image_url),
          i.error ? h("span", { class: "muted" }, ` — not stored: ${i.error}`) : null))));
}

function tagEditor(x) {
  const tags = h("input", { name: "tags", value: x.tags.join(", "), size: 40 });
  return h("form", { class: "row", "aria-label": "Product tags", onsubmit: async (event) => {
    event.preventDefault();
    const list = tags.value.split(",").map((t) => t.trim()).filter(Boolean);
    try {
      const saved = await api("PATCH", `/api/products/${x.id}`, { tags: list });
      tags.value = saved.tags.join(", ");
      toast("Tags saved");
    } catch (error) { toast(errorText(error), "error"); }
  } }, field("Tags (comma-separated)", tags), h("button", { type: "submit" }, "Save tags"));
}

export async function renderOne(view, id) {
  const [x, images] = await Promise.all([
    api("GET", `/api/products/${id}`), api("GET", `/api/products/${id}/images`)]);
  document.title = `${x.product_name} · Forager`;
  const points = x.price_history.filter((p) => p.price !== null)
    .map((p) => [new Date(p.recorded_at), Number(p.price)]);
  view.append(h("p", {}, link("/products", "← Products")),
    h("h1", {}, x.product_name),
    h("dl", { class: "facts card" }, ...[
      ["Price", x.price === null ? "—" : `${x.price} ${x.currency || ""}`],
      ["Original price", x.original_price ?? "—"], ["Brand", x.brand || "—"],
      ["Category", x.category || "—"], ["Availability", x.availability || "—"],
      ["Rating", x.rating === null ? "—" : `${x.rating} (${x.review_count ?? 0} reviews)`],
      ["SKU / ASIN", [x.sku, x.asin].filter(Boolean).join(" / ") || "—"],
      ["URL", outLink(x.url)],
      ["Parser", `${x.parser_name} ${x.parser_version}`],
      ["Last crawled", time(x.last_crawled_at)],
    ].flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    isAdmin() ? tagEditor(x) : h("p", {}, `Tags: ${x.tags.join(", ") || "none"}`),
    h("h2", {}, "Price history"),
    h("div", { class: "card", "data-testid": "price-chart" },
      lineChart(points, `Price history of ${x.product_name}`)),
    table(["Recorded", "Price", "Availability"], x.price_history.slice().reverse().map((p) =>
      h("tr", {}, h("td", {}, time(p.recorded_at)),
        h("td", {}, p.price === null ? "—" : `${p.price} ${p.currency || ""}`),
        h("td", {}, p.availability || "")))),
    h("h2", {}, "Images"),
    imageList(images),
    x.description ? h("section", {}, h("h2", {}, "Description"), h("p", {}, x.description))
      : null);
}
