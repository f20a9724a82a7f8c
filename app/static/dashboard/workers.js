// The header's worker status: live workers and jobs waiting, from GET /workers every few
// seconds while signed in; "No live worker" stands out (queued jobs will not start).

import { api } from "./api.js";

const PERIOD_MS = 5000;

export function watchWorkers(el, signedIn) {
  async function refresh() {
    if (!signedIn()) { el.hidden = true; return; }
    try {
      const s = await api("/workers");
      const workers = s.live === 1 ? "1 worker" : `${s.live} workers`;
      el.textContent = s.live ? `${workers} live · ${s.queued_jobs} queued` : `No live worker · ${s.queued_jobs} queued`;
      el.classList.toggle("none", !s.live);
      el.title = s.live ? s.workers.map((w) => `${w.id} (last seen ${w.last_seen})`).join("\n") : "Queued jobs start when a worker runs (sodm worker).";
      el.hidden = false;
    } catch {
      el.hidden = true; // signed out or the API is unreachable: the page says so
    }
  }
  setInterval(refresh, PERIOD_MS);
  document.addEventListener("sodm:route", refresh); // sign-in, sign-out and every page
  refresh();
}
