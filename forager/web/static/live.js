// The live stream: one EventSource per tab, fed by the server's one shared publisher.
// Pages register handlers for snapshots; navigating away clears them.

const indicator = () => document.getElementById("live");

class Live {
  constructor() {
    this.source = null;
    this.handlers = new Set();
    this.latest = null;
  }

  start() {
    if (this.source) return;
    this.source = new EventSource("/ui/events/stream");
    this.source.addEventListener("open", () => this.mark(true));
    this.source.addEventListener("error", () => this.mark(false));
    this.source.addEventListener("snapshot", (event) => {
      this.latest = JSON.parse(event.data);
      this.mark(true);
      document.body.dataset.liveAt = this.latest.at;
      for (const handler of [...this.handlers]) handler(this.latest);
    });
  }

  stop() {
    if (this.source) this.source.close();
    this.source = null;
    this.mark(false);
  }

  mark(on) {
    const el = indicator();
    el.classList.toggle("on", on);
    el.textContent = on ? "live" : "offline";
  }

  // Calls handler with every snapshot (and at once with the latest one, if any).
  on(handler, now) {
    this.handlers.add(handler);
    if (now && this.latest) handler(this.latest);
  }

  clear() {
    this.handlers.clear();
  }
}

export const live = new Live();
