// Submit: paste URLs or load a file; see which were new, duplicates or invalid and why.

import { api, errorText, field, h, isAdmin, link, table, toast } from "../lib.js";

const CHUNK = 1000;

function urlsOf(text) {
  return text.split(/\r?\n/).map((line) => line.split(",")[0].trim())
    .filter((line) => line && !line.startsWith("#"));
}

export async function render(view) {
  view.append(h("h1", {}, "Submit URLs"));
  if (!isAdmin()) {
    view.append(h("p", { class: "muted" }, "Your key is read-only: it cannot submit URLs."));
    return;
  }
  const urls = h("textarea", { name: "urls", id: "submit-urls", rows: 10,
    placeholder: "https://shop.example/product/1\nhttps://shop.example/product/2" });
  const file = h("input", { type: "file", name: "file", accept: ".txt,.csv,text/plain,text/csv",
    onchange: async () => {
      if (file.files.length) urls.value = await file.files[0].text();
    } });
  const recurring = h("input", { type: "checkbox", name: "is_recurring" });
  const frequency = h("input", { type: "number", name: "crawl_frequency_seconds", min: 60,
    placeholder: "domain default" });
  const adaptive = h("input", { type: "checkbox", name: "adaptive_recrawl" });
  const tags = h("input", { name: "tags", placeholder: "kettles, black-friday" });
  const priority = h("input", { type: "number", name: "priority", min: 1, max: 10, value: 5 });
  const batch = h("input", { name: "batch_name", maxlength: 255 });
  const again = h("input", { type: "checkbox", name: "restart", "data-testid": "submit-again" });
  const results = h("div", { "aria-live": "polite" });
  const form = h("form", { onsubmit: async (event) => {
    event.preventDefault();
    const list = urlsOf(urls.value);
    if (!list.length) { toast("Paste at least one URL", "error"); return; }
    const options = { priority: Number(priority.value || 5), is_recurring: recurring.checked };
    if (frequency.value) options.crawl_frequency_seconds = Number(frequency.value);
    if (batch.value.trim()) options.batch_name = batch.value.trim();
    if (adaptive.checked) options.adaptive_recrawl = true;
    if (again.checked) options.restart = true;
    const tagList = tags.value.split(",").map((t) => t.trim()).filter(Boolean);
    if (tagList.length) options.tags = tagList;
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    const all = { created: 0, duplicate: 0, invalid: 0, results: [] };
    try {
      for (let i = 0; i < list.length; i += CHUNK) {
        const done = await api("POST", "/api/tasks/batch",
          { ...options, urls: list.slice(i, i + CHUNK) });
        all.created += done.created; all.duplicate += done.duplicate; all.invalid += done.invalid;
        all.results.push(...done.results);
      }
    } catch (error) {
      toast(errorText(error), "error");
    } finally {
      button.disabled = false;
    }
    results.replaceChildren(
      h("p", { "data-testid": "submit-summary" },
        `${all.created} new, ${all.duplicate} duplicate, ${all.invalid} invalid`),
      table(["Input", "Result", "Task", "Status / reason"], all.results.map((r) => h("tr",
        { "data-result": r.result },
        h("td", { class: "url" }, r.input_url), h("td", {}, r.result),
        h("td", {}, r.task_id ? link(`/tasks/${r.task_id}`, `#${r.task_id}`) : ""),
        h("td", {}, [r.error || r.status || "", r.hint ? ` — ${r.hint}` : ""].join(""))))));
  } },
  field("URLs, one per line", urls),
  h("div", { class: "row" },
    field("…or load a file (.txt, or .csv with the URL first)", file),
    field("Priority (1 highest)", priority),
    h("label", { class: "inline" }, recurring, "Recurring"),
    field("Every (seconds)", frequency),
    h("label", { class: "inline", title: "Sooner after a price or availability change, "
      + "less often while nothing changes" }, adaptive, "Adaptive"),
    field("Tags (comma-separated)", tags),
    field("Batch name", batch),
    h("label", { class: "inline", title: "A URL whose task has finished (completed, failed or "
      + "cancelled) is crawled again with these options" }, again, "Crawl again if done"),
    h("button", { type: "submit", class: "primary" }, "Submit")));
  view.append(form, results);
}
