// Products: search and filters (in the URL: codes and rating too), sorted by price, rating or
// last change, price change arrows, export of the current filter (and order); a product's page
// with its images and price history chart.

import {
  api, errorText, exportLinks, field, formValues, go, h, isAdmin, link, lineChart, outLink,
  pager, params, query, select, sortHeader, table, time, toast,
} from "../lib.js";

// Every filter the list and its exports take (GET /api/products); a bad value is the API's 422,
// which names the field.
const FILTERS = ["q", "tag", "brand", "category", "domain", "sku", "asin", "gtin", "min_price",
  "max_price", "currency", "min_rating", "is_available"];

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
  const sort = p.get("sort") || null; // by clicking a column header; else relevance / newest
  const sortBy = (key) => go(`/products${query({ ...values, sort: key })}`);
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
    input("sku", "SKU", { size: 10, maxlength: 100 }),
    input("asin", "ASIN", { size: 10, maxlength: 10 }),
    input("gtin", "GTIN / EAN", { size: 14, maxlength: 21 }),
    input("min_price", "Price from", { type: "number", step: "0.01", min: 0 }),
    input("max_price", "to", { type: "number", step: "0.01", min: 0 }),
    input("currency", "Currency", { size: 3, maxlength: 3 }),
    input("min_rating", "Rating from", { type: "number", step: "0.1", min: 0, max: 5 }),
    field("Available", select("is_available", [["", "any"], ["true", "yes"], ["false", "no"]],
      values.is_available || "")),
    // A new filter keeps the order chosen by a column header.
    sort ? h("input", { type: "hidden", name: "sort", value: sort }) : null,
    h("button", { type: "submit", class: "primary" }, "Search"),
    h("a", { href: "/products", "data-link": true }, "Clear")),
    exportLinks("/api/products", { ...values, sort }));
  const data = await api("GET", `/api/products${query({ ...values, sort, limit: 50, offset })}`);
  const ids = data.items.map((x) => x.id);
  const previous = ids.length
    ? (await api("GET", `/ui/products/previous-prices?ids=${ids.join(",")}`)).previous : {};
  if (!current()) return;
  if (!data.total && !data.items.length) {
    view.append(h("p", { class: "muted", "data-testid": "no-products" },
      Object.keys(values).length ? "No products match this search." : "No products yet."));
    return;
  }
  view.append(table([sortHeader("Product", "name", sort, sortBy),
    sortHeader("Price", "price", sort, sortBy), sortHeader("Rating", "rating", sort, sortBy),
    "Brand", "Tags", "Available", sortHeader("Last change", "updated", sort, sortBy)],
    data.items.map((x) => h("tr", { "data-product-id": x.id },
      h("td", {}, link(`/products/${x.id}`, x.product_name)),
      h("td", { class: "num" }, x.price === null ? "—" : `${x.price} ${x.currency || ""}`,
        arrow(x.price, previous[String(x.id)])),
      h("td", { class: "num", "data-cell": "rating" },
        x.rating === null ? "—" : String(Number(x.rating))),
      h("td", {}, x.brand || ""),
      h("td", {}, x.tags.map((t) => link(`/products${query({ tag: t })}`, t))
        .flatMap((a, i) => (i ? [" ", a] : [a]))),
      h("td", {}, x.is_available === null ? "?" : x.is_available ? "yes" : "no"),
      h("td", {}, time(x.updated_at)))), { "aria-label": "Products" }),
  pager(data, (o) => go(`/products${query({ ...values, sort, offset: o })}`)));
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
        h("figcaption", { class: "muted" }, imageFacts(i), outLink(i.image_url)))
        : h("span", {}, outLink(i.image_url),
          i.error ? h("span", { class: "muted" }, ` — not stored: ${i.error}`) : null))));
}

// "40×30 image/png, 1234 bytes · ": only what is known (a header Pillow could not read has no
// size), never a "null".
function imageFacts(image) {
  const size = image.width && image.height ? `${image.width}×${image.height}` : null;
  const bytes = image.file_size === null ? null : `${image.file_size} bytes`;
  const facts = [[size, image.content_type].filter(Boolean).join(" "), bytes].filter(Boolean);
  return facts.length ? `${facts.join(", ")} · ` : "";
}

function money(price, currency) {
  return price === null ? "—" : `${price} ${currency || ""}`.trim();
}

// What changed from one recorded crawl to the next, newest first (like a changedetection.io
// diff): the price move with its size, and availability when it changed.
function historyDiff(history) {
  const rows = [];
  history.forEach((p, i) => {
    const before = i ? history[i - 1] : null;
    const changes = [];
    if (!before) changes.push(h("span", { class: "muted" }, "first seen"));
    else {
      if (p.price !== before.price || p.currency !== before.currency) {
        const [a, b] = [Number(before.price), Number(p.price)];
        const delta = before.price !== null && p.price !== null ? b - a : null;
        changes.push(h("span", { class: delta === null ? "" : delta > 0 ? "up" : "down",
          "data-change": "price" },
        `price ${money(before.price, before.currency)} → ${money(p.price, p.currency)}`,
        delta === null || !a ? "" : ` (${delta > 0 ? "+" : "−"}${Math.abs(delta).toFixed(2)}, `
          + `${delta > 0 ? "+" : "−"}${Math.abs((100 * delta) / a).toFixed(1)} %)`));
      }
      if ((p.availability || "") !== (before.availability || "")) {
        changes.push(h("span", { "data-change": "availability" },
          `availability ${before.availability || "—"} → ${p.availability || "—"}`));
      }
      if (!changes.length) changes.push(h("span", { class: "muted" }, "no change"));
    }
    rows.push(h("tr", { "data-point": String(i) }, h("td", {}, time(p.recorded_at)),
      h("td", { class: "num" }, money(p.price, p.currency)), h("td", {}, p.availability || ""),
      h("td", {}, changes.flatMap((c, n) => (n ? [" · ", c] : [c])))));
  });
  return table(["Recorded", "Price", "Availability", "What changed"], rows.reverse(),
    { "aria-label": "Price history changes" });
}

// A chart needs two prices; one is shown as that price, with when it was recorded.
function priceChart(points, name) {
  if (points.length >= 2) return lineChart(points, `Price history of ${name}`);
  if (points.length === 1) {
    return h("p", { "data-testid": "single-price" }, `One price so far: ${points[0][1]}, on `,
      points[0][0].toLocaleString(), ". The chart starts with the second crawl.");
  }
  return h("p", { class: "muted" }, "No price recorded yet.");
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
      ["GTIN", x.gtin || "—"],
      ["URL", outLink(x.url)],
      ["Parser", `${x.parser_name} ${x.parser_version}`],
      ["Last crawled", time(x.last_crawled_at)],
    ].flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    isAdmin() ? tagEditor(x) : h("p", {}, `Tags: ${x.tags.join(", ") || "none"}`),
    h("h2", {}, "Price history"),
    h("div", { class: "card", "data-testid": "price-chart" },
      priceChart(points, x.product_name)),
    historyDiff(x.price_history),
    h("h2", {}, "Images"),
    imageList(images),
    x.description ? h("section", {}, h("h2", {}, "Description"), h("p", {}, x.description))
      : null);
}
