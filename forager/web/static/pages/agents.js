// Agents (only when the server has the agents API): live status from the shared stream,
// reset a BLOCKED agent, revoke, rotate the token, create one (the token is shown once).

import { api, confirmAction, errorText, field, h, isAdmin, table, time, toast } from "../lib.js";
import { live } from "../live.js";

function tokenNotice(agent) {
  return h("div", { class: "alert", role: "status", "data-testid": "agent-token" },
    h("p", {}, `Token of ${agent.name}, shown only now; copy it into the agent's configuration:`),
    h("code", {}, agent.token));
}

function actions(agent, notice) {
  if (!isAdmin()) return null;
  const run = (label, path, ask, shows) => h("button", { type: "button", onclick: async () => {
    if (ask && !(await confirmAction(ask, `${label} ${agent.name}`, "Go back"))) return;
    try {
      const done = await api("POST", `/api/agents/${agent.id}/${path}`);
      toast(`${label}: ${agent.name}`);
      if (shows) notice.replaceChildren(tokenNotice(done));
    } catch (error) { toast(errorText(error), "error"); }
  } }, label);
  return [
    agent.status === "blocked" ? run("Reset", "reset") : null,
    run("New token", "rotate-token", `Give ${agent.name} a new token? The old one stops working.`,
      true),
    run("Revoke", "revoke", `Revoke ${agent.name}? It is disconnected and refused from now on.`),
  ];
}

export async function render(view, _arg, current) {
  const notice = h("div", {});
  const list = h("div", {});
  view.append(h("h1", {}, "Agents"), notice);
  if (isAdmin()) {
    const name = h("input", { name: "name", maxlength: 100, required: true });
    view.append(h("form", { class: "row", onsubmit: async (event) => {
      event.preventDefault();
      try {
        const agent = await api("POST", "/api/agents", { name: name.value.trim() });
        notice.replaceChildren(tokenNotice(agent));
        name.value = "";
      } catch (error) { toast(errorText(error), "error"); }
    } }, field("New agent name", name), h("button", { type: "submit", class: "primary" },
      "Create agent")));
  }
  view.append(list);
  list.append(h("p", { class: "muted" }, "Waiting for live data…"));
  let last = null;
  live.on((snapshot) => {
    const agents = snapshot.agents || [];
    const now = JSON.stringify(agents);
    if (!current() || now === last) return; // redraw only on change: focus stays put
    last = now;
    list.replaceChildren(agents.length ? table(["Agent", "Status", "Last heartbeat", "ISP / IP",
      "Done", "Failed", "Blocked because", ""], agents.map((a) => h("tr", { "data-agent": a.name },
      h("td", {}, a.name), h("td", {}, h("span", { class: `status ${a.status}` }, a.status)),
      h("td", {}, time(a.last_heartbeat_at)),
      h("td", {}, [a.isp_name, a.external_ip].filter(Boolean).join(" / ") || "—"),
      h("td", { class: "num" }, String(a.tasks_completed_count)),
      h("td", { class: "num" }, String(a.tasks_failed_count)),
      h("td", {}, a.blocked_reason || ""),
      h("td", {}, actions(a, notice))))) : h("p", { class: "muted" }, "No agents."));
  }, true);
}
