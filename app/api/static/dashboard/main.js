// The single-page app: client-side routing under /dashboard, sign-in gate, and page lifecycle
// (each page gets an AbortSignal that fires when the user navigates away, which stops its
// polling timers and event streams).

import { BASE, clearKey, getKey, setUnauthorizedHandler } from "./api.js";
import { renderCompare } from "./pages/compare.js";
import { renderDatasets, renderDataset } from "./pages/datasets.js";
import { renderJob } from "./pages/job.js";
import { renderJobs } from "./pages/jobs.js";
import { renderModel } from "./pages/model.js";
import { renderModels } from "./pages/models.js";
import { renderPredictions } from "./pages/predictions.js";
import { renderSignIn } from "./pages/signin.js";
import { renderTrain } from "./pages/train.js";
import { h, toast } from "./ui.js";
import { watchWorkers } from "./workers.js";

const ROUTES = [
  [/^\/?$/, "jobs", renderJobs],
  [/^\/jobs\/?$/, "jobs", renderJobs],
  [/^\/jobs\/([\w-]+)$/, "jobs", renderJob],
  [/^\/models\/?$/, "models", renderModels],
  [/^\/compare\/?$/, "models", renderCompare],
  [/^\/models\/([\w-]+)$/, "models", renderModel],
  [/^\/datasets\/?$/, "datasets", renderDatasets],
  [/^\/datasets\/([\w-]+)$/, "datasets", renderDataset],
  [/^\/predictions\/?$/, "predictions", renderPredictions],
  [/^\/train\/?$/, "train", renderTrain],
];

const main = document.getElementById("main");
let current = null; // AbortController of the page on screen
let firstRoute = true; // on a fresh load focus stays at the document start (skip link first)

function appPath() {
  const prefix = `${BASE}/dashboard`;
  const p = location.pathname.startsWith(prefix) ? location.pathname.slice(prefix.length) : "/";
  return p || "/";
}

/** Go to an app path such as "/jobs/123" (pushes history unless ``replace``). */
export function navigate(path, { replace = false } = {}) {
  const url = `${BASE}/dashboard${path}`;
  if (replace) history.replaceState(null, "", url); else history.pushState(null, "", url);
  route();
}

async function route() {
  if (current) current.abort();
  current = new AbortController();
  const { signal } = current;
  const signedIn = Boolean(getKey());
  document.dispatchEvent(new Event("sodm:route"));
  document.getElementById("nav").hidden = !signedIn;
  document.getElementById("signout").hidden = !signedIn;
  main.replaceChildren();
  if (!signedIn) {
    document.title = "Sign in · SODM";
    renderSignIn(main, { signal, navigate, onSignedIn: () => navigate(appPath() === "/" ? "/jobs" : appPath() + location.search, { replace: true }) });
    focusMain();
    return;
  }
  const path = appPath();
  const params = new URLSearchParams(location.search);
  for (const [re, nav, render] of ROUTES) {
    const m = re.exec(path);
    if (!m) continue;
    for (const a of document.querySelectorAll("[data-nav]")) {
      if (a.dataset.nav === nav) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
    }
    try {
      await render(main, { id: m[1], params, signal, navigate });
    } catch (err) {
      if (err.name === "AbortError" || signal.aborted) return;
      main.append(h("div.problem", { role: "alert" }, h("strong", {}, "Could not load this page"), h("p", {}, String(err.message || err))));
    }
    focusMain();
    return;
  }
  document.title = "Not found · SODM";
  main.append(h("h1", {}, "Page not found"), h("p", {}, "There is no dashboard page at this address."));
}

/** After an in-app navigation, move focus to the new content (as a page load would reset it). */
function focusMain() {
  if (firstRoute) { firstRoute = false; return; }
  if (document.activeElement === document.body || !document.activeElement) main.focus({ preventScroll: true });
}

document.addEventListener("click", (e) => {
  const a = e.target.closest("a[data-link]");
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const url = new URL(a.href);
  if (url.origin !== location.origin) return;
  e.preventDefault();
  const prefix = `${BASE}/dashboard`;
  navigate((url.pathname.slice(prefix.length) || "/") + url.search);
});

window.addEventListener("popstate", route);

document.getElementById("signout").addEventListener("click", () => {
  clearKey();
  navigate("/", { replace: true });
});

setUnauthorizedHandler(() => {
  if (!getKey()) return;
  clearKey();
  toast("Your API key was refused; please sign in again.");
  route();
});

route();
// the header's worker status: one watcher for the tab's whole life (pages start and stop
// their own polling through their AbortSignal)
watchWorkers(document.getElementById("workers"), () => Boolean(getKey()));
