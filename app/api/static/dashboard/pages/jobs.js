// Jobs: one page of the cursor-paginated list (GET /jobs?limit=N, filtered by state, dataset and
// model name), refreshed by polling that
// same page (one request per tick; faster while a shown job is active) so states and progress
// bars move without a reload. Elapsed times of running jobs tick every second.

import { api, listAll, qs } from "../api.js";
import { datasetNames } from "../store.js";
import {
  TERMINAL, elapsedOf, fill, fmtDate, fmtDuration, h, link, pageHeader, problemBox, progressBar,
  shortId, stateBadge,
} from "../ui.js";

export const PAGE_SIZE = 20;
const ACTIVE_POLL_MS = 1500;
const IDLE_POLL_MS = 5000;
const STATES = ["", "QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLING", "CANCELLED"];

export async function renderJobs(main, { params, signal, navigate }) {
  document.title = "Jobs · SODM";
  const state = params.get("state") || "";
  const datasetId = params.get("dataset_id") || "";
  const modelName = params.get("name") || "";
  const filters = { state, dataset_id: datasetId, name: modelName };
  const cursor = params.get("cursor") || "";
  const pageNo = Number(params.get("page") || 1);

  const apply = () => navigate(`/jobs${qs({ state: filter.value, dataset_id: dsFilter.value, name: nameFilter.value.trim() })}`);
  const filter = h("select#state-filter", { onchange: apply },
    STATES.map((st) => h("option", { value: st, selected: st === state }, st || "All states")));
  const dsFilter = h("select#dataset-filter", { onchange: apply }, h("option", { value: "" }, "All datasets"));
  const nameFilter = h("input#name-filter", { type: "search", value: modelName, placeholder: "any", size: 14,
    pattern: "[A-Za-z0-9][A-Za-z0-9._\\-]*", onchange: apply });
  const filterForm = h("form.filters", { role: "search", "aria-label": "Filter jobs", onsubmit: (e) => { e.preventDefault(); apply(); } },
    h("label.inline", { for: "state-filter" }, "State ", filter),
    h("label.inline", { for: "dataset-filter" }, "Dataset ", dsFilter),
    h("label.inline", { for: "name-filter" }, "Model name ", nameFilter));
  main.append(pageHeader("Jobs", link("/train", "New training job")), filterForm);
  main.querySelector(".page-head .actions a").classList.add("button", "primary");
  listAll("/datasets", { signal, maxPages: 5 }).then((all) => {
    for (const d of all) dsFilter.append(h("option", { value: d.id, selected: d.id === datasetId }, d.name));
    if (datasetId && !all.some((d) => d.id === datasetId)) dsFilter.append(h("option", { value: datasetId, selected: true }, shortId(datasetId)));
  }).catch(() => {});

  const live = h("p.muted.live", { "aria-live": "off" });
  const holder = h("div#jobs-table");
  const pager = h("nav.pager", { "aria-label": "Job pages" });
  main.append(holder, pager, live);

  const rows = new Map(); // job id -> {tr, job, bar, badgeCell, elapsedCell, ...}
  let names = new Map();

  function buildRow(job) {
    const bar = progressBar(job.progress?.fraction, `Progress of job ${shortId(job.id)}`);
    const cells = {
      badge: h("td", { "data-label": "State" }),
      alg: h("td", { "data-label": "Algorithm" }),
      backend: h("td", { "data-label": "Backend" }),
      dataset: h("td", { "data-label": "Dataset" }),
      progress: h("td.progress-cell", { "data-label": "Progress" }, bar),
      elapsed: h("td.num", { "data-label": "Elapsed" }),
      created: h("td", { "data-label": "Created" }),
    };
    const tr = h("tr", { dataset: { jobId: job.id } },
      h("th", { scope: "row", "data-label": "Job" }, link(`/jobs/${job.id}`, job.name || shortId(job.id))),
      Object.values(cells));
    const r = { tr, bar, cells, job: null };
    updateRow(r, job);
    return r;
  }

  function updateRow(r, job) {
    const prev = r.job;
    r.job = job;
    if (!prev || prev.state !== job.state) r.cells.badge.replaceChildren(stateBadge(job.state));
    r.cells.alg.textContent = job.algorithm + (job.params?.kernel ? ` · ${job.params.kernel}` : "");
    r.cells.backend.textContent = job.backend;
    const dsName = names.get(job.dataset_id);
    r.cells.dataset.replaceChildren(link(`/datasets/${job.dataset_id}`, dsName || shortId(job.dataset_id)));
    r.bar.update(job.state === "SUCCEEDED" ? 1 : job.progress?.fraction, job.state);
    r.bar.title = job.progress?.message || "";
    r.cells.elapsed.textContent = fmtDuration(elapsedOf(job));
    r.cells.created.textContent = fmtDate(job.created_at);
  }

  let tbody = null;
  function render(page) {
    const ids = page.items.map((j) => j.id);
    const same = tbody && ids.length === rows.size && ids.every((id, i) => rows.has(id) && tbody.children[i]?.dataset.jobId === id);
    if (same) {
      for (const j of page.items) updateRow(rows.get(j.id), j);
    } else {
      rows.clear();
      if (!page.items.length) {
        tbody = null;
        const filtered = state || datasetId || modelName;
        holder.replaceChildren(h("p.empty-state", {}, filtered ? "No jobs match these filters." : "No jobs yet. ", filtered ? null : link("/train", "Train a model")));
      } else {
        tbody = h("tbody", {}, page.items.map((j) => { const r = buildRow(j); rows.set(j.id, r); return r.tr; }));
        holder.replaceChildren(h("div.table-wrap", {}, h("table.jobs", {},
          h("caption.sr-only", {}, "Training jobs, newest first"),
          h("thead", {}, h("tr", {}, ["Job", "State", "Algorithm", "Backend", "Dataset", "Progress", "Elapsed", "Created"]
            .map((c) => h("th", { scope: "col" }, c)))),
          tbody)));
      }
    }
    fill(pager,
      pageNo > 1 ? h("button.link-button", { type: "button", onclick: () => history.back() }, "← Newer") : null,
      h("span.muted", {}, `Page ${pageNo}`),
      page.next_cursor ? link(`/jobs${qs({ ...filters, cursor: page.next_cursor, page: pageNo + 1 })}`, "Older →") : null);
    live.textContent = `Updated ${new Date().toLocaleTimeString("en-GB")}`;
  }

  async function load() {
    const page = await api(`/jobs${qs({ limit: PAGE_SIZE, ...filters, cursor })}`, { signal });
    const dsIds = [...new Set(page.items.map((j) => j.dataset_id))];
    try { names = await datasetNames({ ids: dsIds, signal }); } catch (err) { if (signal.aborted) throw err; }
    render(page);
    return page.items.some((j) => !TERMINAL.has(j.state));
  }

  let active;
  try {
    active = await load();
  } catch (err) {
    if (signal.aborted) return;
    holder.replaceChildren(problemBox(err));
    return;
  }

  // live refresh: poll this page; tick elapsed times of running jobs every second
  let timer = null;
  const schedule = (ms) => { timer = setTimeout(tick, ms); };
  async function tick() {
    if (signal.aborted) return;
    try { active = await load(); } catch (err) { if (signal.aborted) return; live.textContent = `Refresh failed: ${err.message}`; }
    if (!signal.aborted) schedule(active ? ACTIVE_POLL_MS : IDLE_POLL_MS);
  }
  schedule(active ? ACTIVE_POLL_MS : IDLE_POLL_MS);
  const clock = setInterval(() => {
    for (const r of rows.values()) if (r.job.started_at && !r.job.finished_at) r.cells.elapsed.textContent = fmtDuration(elapsedOf(r.job));
  }, 1000);
  signal.addEventListener("abort", () => { clearTimeout(timer); clearInterval(clock); });
}
