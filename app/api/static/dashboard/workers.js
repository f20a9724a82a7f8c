// The header's worker status: live workers and your jobs waiting, from GET /workers every few
// seconds while signed in and the tab is visible; "No live worker" stands out (queued jobs
// will not start). One watcher per tab: a second call returns the first one's stop function.

import { api } from "./api.js";

const PERIOD_MS = 5000;
let stopWatching = null;

export function watchWorkers(el, signedIn) {
  if (stopWatching) return stopWatching;
  let inFlight = false;
  async function refresh() {
    if (!signedIn()) { el.hidden = true; return; }
    if (document.hidden || inFlight) return; // nobody looks, or the last answer is pending
    inFlight = true;
    try {
      const s = await api("/workers");
      const workers = s.live === 1 ? "1 worker" : `${s.live} workers`;
      el.textContent = s.live ? `${workers} live · ${s.queued_jobs} queued` : `No live worker · ${s.queued_jobs} queued`;
      el.classList.toggle("none", !s.live);
      el.title = s.live
        ? `${s.slots} job slot${s.slots === 1 ? "" : "s"}; your jobs: ${s.running_jobs} running, ${s.queued_jobs} queued; last heartbeat ${s.last_seen}`
        : "Queued jobs start when a worker runs (sodm worker).";
      el.hidden = false;
    } catch {
      el.hidden = true; // signed out or the API is unreachable: the page says so
    } finally {
      inFlight = false;
    }
  }
  const timer = setInterval(refresh, PERIOD_MS);
  document.addEventListener("sodm:route", refresh); // sign-in, sign-out and every page
  document.addEventListener("visibilitychange", refresh);
  refresh();
  stopWatching = () => {
    clearInterval(timer);
    document.removeEventListener("sodm:route", refresh);
    document.removeEventListener("visibilitychange", refresh);
    stopWatching = null;
  };
  return stopWatching;
}
