// The dashboard shell: login, navigation (real URLs, history API), and the live stream.

import { api, errorText, field, h, session, toast } from "./lib.js";
import { live } from "./live.js";
import * as overview from "./pages/overview.js";
import * as tasks from "./pages/tasks.js";
import * as batches from "./pages/batches.js";
import * as submit from "./pages/submit.js";
import * as jobs from "./pages/jobs.js";
import * as domains from "./pages/domains.js";
import * as proxies from "./pages/proxies.js";
import * as products from "./pages/products.js";
import * as items from "./pages/items.js";
import * as feeds from "./pages/feeds.js";
import * as events from "./pages/events.js";
import * as agents from "./pages/agents.js";
import * as missions from "./pages/missions.js";
import * as monitors from "./pages/monitors.js";
import * as alerts from "./pages/alerts.js";
import * as selectors from "./pages/selectors.js";

const PAGES = [
  ["/", "Overview", overview.render],
  ["/tasks", "Tasks", tasks.render],
  ["/batches", "Batches", batches.render],
  ["/submit", "Submit", submit.render],
  ["/jobs", "Jobs", jobs.render],
  ["/domains", "Domains", domains.render],
  ["/proxies", "Proxies", proxies.render],
  ["/products", "Products", products.render],
  ["/items", "Items", items.render],
  ["/feeds", "Feeds", feeds.render],
  ["/agents", "Agents", agents.render],
  ["/missions", "Missions", missions.render],
  ["/monitors", "Monitors", monitors.render],
  ["/alerts", "Alerts", alerts.render],
  ["/events", "Events", events.render],
];
const DETAILS = [
  [/^\/tasks\/(\d+)$/, tasks.renderOne, "/tasks"],
  [/^\/products\/(\d+)$/, products.renderOne, "/products"],
  [/^\/items\/(\d+)$/, items.renderOne, "/items"],
  [/^\/domains\/(\d+)\/parser$/, selectors.render, "/domains"],
];

const main = document.getElementById("main");
let generation = 0;

function pages() {
  return PAGES.filter(([path]) => path !== "/agents" || session.who.features.agents);
}

function drawNav(current) {
  const nav = document.getElementById("nav");
  nav.replaceChildren(...pages().map(([path, title]) => h("a", {
    href: path, "data-link": true, "aria-current": path === current ? "page" : null,
  }, title)));
}

export function navigate(url, replace) {
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  route();
}

async function route() {
  generation += 1;
  const mine = generation;
  live.clear();
  if (!session.who) return showLogin();
  const path = location.pathname;
  let render = null; let section = path; let arg = null;
  for (const [pattern, fn, parent] of DETAILS) {
    const match = pattern.exec(path);
    if (match) { render = fn; section = parent; arg = Number(match[1]); }
  }
  if (!render) {
    const found = pages().find(([p]) => p === path);
    render = found ? found[2] : null;
    if (found) document.title = `${found[1]} · Forager`;
  }
  drawNav(section);
  document.getElementById("nav").classList.remove("open"); // a phone's menu closes
  document.querySelector(".menu-toggle").setAttribute("aria-expanded", "false");
  if (!render) {
    main.replaceChildren(h("h1", {}, "Not found"), h("p", {}, "No such page."));
    return;
  }
  const view = h("div", { "data-page": section });
  main.replaceChildren(view);
  try {
    await render(view, arg, () => mine === generation);
  } catch (error) {
    if (mine === generation) view.append(h("p", { class: "alert", role: "alert" }, errorText(error)));
  }
}

function showLogin() {
  live.stop();
  document.getElementById("nav").replaceChildren();
  document.getElementById("logout").hidden = true;
  document.getElementById("who-name").textContent = "";
  document.title = "Log in · Forager";
  const input = h("input", { name: "key", type: "password", autocomplete: "current-password",
    required: true, id: "api-key" });
  const message = h("p", { role: "alert", class: "muted" });
  const form = h("form", { class: "login card", onsubmit: async (event) => {
    event.preventDefault();
    message.textContent = "";
    try {
      session.who = await api("POST", "/ui/login", { key: input.value });
      input.value = "";
      start();
      navigate(location.pathname === "/login" ? "/" : location.pathname + location.search, true);
    } catch (error) {
      message.textContent = errorText(error);
    }
  } },
  h("h1", {}, "Log in"),
  h("p", { class: "muted" }, "Log in with an API key. For the first one, run ",
    h("code", {}, "make apikey"), " in Forager's folder (or ",
    h("code", {}, ".venv/bin/forager apikey create --name admin --role admin"),
    "): it prints the key once. Read keys can look at everything and change nothing."),
  field("API key", input),
  h("p", {}, h("button", { type: "submit", class: "primary" }, "Log in")),
  message);
  main.replaceChildren(form);
  input.focus();
}

function start() {
  document.getElementById("who-name").textContent =
    `${session.who.name} (${session.who.role === "admin" ? "admin" : "read-only"})`;
  document.getElementById("logout").hidden = false;
  document.body.dataset.role = session.who.role;
  live.start();
}

document.addEventListener("click", (event) => {
  const anchor = event.target.closest("a[data-link]");
  if (!anchor || event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
  event.preventDefault();
  navigate(anchor.getAttribute("href"));
});
window.addEventListener("popstate", route);
document.querySelector(".menu-toggle").addEventListener("click", (event) => {
  const open = document.getElementById("nav").classList.toggle("open");
  event.currentTarget.setAttribute("aria-expanded", String(open));
});
document.getElementById("logout").addEventListener("click", async () => {
  try {
    await api("POST", "/ui/logout");
  } catch (error) {
    toast(errorText(error), "error");
  }
  session.who = null;
  history.pushState(null, "", "/login");
  showLogin();
});
session.navigate = navigate;
session.onUnauthorized = () => {
  if (session.who) { session.who = null; showLogin(); }
};

(async () => {
  try {
    session.who = await api("GET", "/ui/session");
  } catch {
    session.who = null;
  }
  if (session.who) {
    start();
    if (location.pathname === "/login") history.replaceState(null, "", "/");
  }
  route();
})();
