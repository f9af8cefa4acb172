// Progress of the queue or of one batch: a bar, the recent rate and the end it gives, and for
// each domain with work the one limit on its rate now, as /api/progress words it.

import { api, h, plural, query } from "../lib.js";

const EVERY_MS = 3000;

function bar(done, total) {
  return h("progress", { max: Math.max(total, 1), value: done, "aria-label": "Done",
    "data-testid": "progress-bar" });
}

function summary(p) {
  const parts = [`${p.done} of ${p.total} done`];
  if (p.paused) parts.push(`${p.paused} paused`);
  if (p.rate_per_minute !== null) parts.push(`${p.rate_per_minute} per minute lately`);
  if (p.estimated_end) {
    const end = new Date(p.estimated_end);
    parts.push(`estimated end ${end.toLocaleTimeString([], { hour: "2-digit",
      minute: "2-digit", second: "2-digit" })}`);
  } else if (p.remaining) {
    parts.push("no estimated end yet (nothing finished in the last 10 minutes)");
  }
  return parts.join(" · ");
}

function waits(domains) {
  if (!domains.length) return h("p", { class: "muted" }, "No task is waiting.");
  return h("ul", { class: "waits", "aria-label": "Why tasks wait" }, domains.map((d) =>
    h("li", { "data-domain": d.domain, "data-reason": d.reason },
      h("b", {}, d.domain), `: ${d.message}`)));
}

// { el, refresh(force) }: refresh at most every few seconds unless forced.
export function progressView(batchName) {
  const el = h("div", { class: "card progress", "data-testid": "progress" },
    h("p", { class: "muted" }, "Loading progress…"));
  let last = 0;
  let busy = false;
  async function refresh(force) {
    if (busy || (!force && Date.now() - last < EVERY_MS)) return;
    busy = true;
    try {
      const p = await api("GET", `/api/progress${query({ batch_name: batchName })}`);
      last = Date.now();
      const what = batchName ? `Batch ${batchName}` : "Queue";
      el.replaceChildren(
        h("p", { "data-testid": "progress-summary" }, h("b", {}, `${what}: `), summary(p)),
        bar(p.done, p.total),
        ...[p.remaining ? h("p", { class: "muted" },
          `${plural(p.remaining, "task")} to go; why they wait, per domain:`) : null,
        waits(p.domains)].filter(Boolean)); // replaceChildren writes a null as "null"
    } catch (error) {
      el.replaceChildren(h("p", { class: "alert" }, `Progress unavailable: ${error.message}`));
    } finally {
      busy = false;
    }
  }
  return { el, refresh };
}
