// Batch predictions: the prediction jobs (GET /predictions) with live state and progress
// (polled while any is queued or running), cancel, and the result downloads (Parquet, CSV);
// ``renderPredictionJob`` is one job's page (/jobs/{id} of a prediction job: model, dataset,
// rows done, downloads); ``batchForm`` starts one from a model page.

import { api, download, listAll, qs } from "../api.js";
import { datasetNames } from "../store.js";
import { TERMINAL, dl, fmtDate, fmtNum, h, link, pageHeader, problemBox, progressBar, section, shortId, stateBadge, table, toast } from "../ui.js";

const POLL_MS = 1000;

function downloads(job) {
  if (job.state !== "SUCCEEDED") return h("span.muted", {}, "—");
  const get = (format) => async () => {
    try { toast(`Saved ${await download(`/predictions/${job.id}/result?format=${format}`, `predictions-${job.id.slice(0, 8)}.${format}`)}`); } catch (err) { toast(`Download failed: ${err.message}`); }
  };
  return h("span.actions", {},
    h("button.link-button", { type: "button", "aria-label": `Download ${shortId(job.id)} as Parquet`, onclick: get("parquet") }, "Parquet"), " · ",
    h("button.link-button", { type: "button", "aria-label": `Download ${shortId(job.id)} as CSV`, onclick: get("csv") }, "CSV"));
}

export async function renderPredictions(main, { signal }) {
  document.title = "Predictions · SODM";
  main.append(pageHeader("Batch predictions"),
    h("p.muted", {}, "Start one from a model's page: the model runs over a stored dataset of any size and the labels and decision values download as Parquet or CSV."));
  const box = h("div#predictions-table");
  const out = h("div", { "aria-live": "polite" });
  main.append(box, out);
  let names = new Map();
  async function refresh() {
    const page = await api(`/predictions${qs({ limit: 50 })}`, { signal });
    try { names = await datasetNames({ ids: page.items.map((j) => j.dataset_id), signal }); } catch { /* names are cosmetic */ }
    if (!page.items.length) {
      box.replaceChildren(h("p.empty-state", {}, "No batch predictions yet. ", link("/models", "Pick a model")));
      return false;
    }
    box.replaceChildren(table([
      { label: "Job", cell: (j) => link(`/jobs/${j.id}`, h("code", {}, shortId(j.id))) },
      { label: "Model", cell: (j) => link(`/models/${j.model_id}`, `${j.model_name} v${j.version}`) },
      { label: "Dataset", cell: (j) => link(`/datasets/${j.dataset_id}`, names.get(j.dataset_id) || shortId(j.dataset_id)) },
      { label: "State", cell: (j) => stateBadge(j.state) },
      { label: "Progress", cell: (j) => { const bar = progressBar(j.progress.fraction, `Progress of ${shortId(j.id)}`); bar.update(j.progress.fraction, j.state); return [bar, h("span.muted.small", {}, j.error ? j.error.detail : j.progress.message)]; } },
      { label: "Rows", className: "num", cell: (j) => (j.result ? fmtNum(j.result.rows) : "—") },
      { label: "Created", cell: (j) => fmtDate(j.created_at) },
      { label: "Result", cell: (j) => (TERMINAL.has(j.state) ? downloads(j) : h("button.link-button", { type: "button", "aria-label": `Cancel ${shortId(j.id)}`, onclick: async () => {
        try { await api(`/predictions/${j.id}/cancel`, { method: "POST" }); await refresh(); } catch (err) { out.replaceChildren(problemBox(err)); }
      } }, "Cancel")) },
    ], page.items, { caption: "Batch prediction jobs, newest first", rowAttrs: (j) => ({ dataset: { jobId: j.id, state: j.state } }) }));
    return page.items.some((j) => !TERMINAL.has(j.state));
  }
  const loop = async () => {
    if (signal.aborted) return;
    let active = false;
    try { active = await refresh(); } catch (err) { if (signal.aborted) return; out.replaceChildren(problemBox(err)); }
    if (active && !signal.aborted) setTimeout(loop, POLL_MS);
  };
  await loop();
}

function rowsText(j) {
  return j.rows_total == null ? "—" : `${fmtNum(j.rows_done ?? 0)} of ${fmtNum(j.rows_total)} rows`;
}

/** One prediction job's page (polled until it ends): state, rows done, model, dataset,
 * cancel while it runs, the downloads once it succeeded. */
export async function renderPredictionJob(main, job, { signal }) {
  document.title = `Prediction ${shortId(job.id)} · SODM`;
  const badge = h("span");
  const bar = progressBar(0, "Prediction progress");
  const message = h("p.progress-message", { "aria-live": "polite" });
  const rows = h("p#prediction-rows");
  const results = h("div#prediction-downloads");
  const facts = h("div");
  const out = h("div", { "aria-live": "polite" });
  const cancelBtn = h("button.danger#cancel", { type: "button" }, "Cancel job");
  main.append(pageHeader(`Batch prediction ${shortId(job.id)}`, badge, cancelBtn),
    h("section.card.live-status", {}, bar, message, rows, results, out), section("Details", facts));
  let names = new Map();
  try { names = await datasetNames({ ids: [job.dataset_id], signal }); } catch { /* names are cosmetic */ }
  function show(j) {
    badge.replaceChildren(stateBadge(j.state));
    bar.update(j.progress.fraction, j.state);
    message.textContent = j.error ? j.error.detail : j.progress.message || j.state.toLowerCase();
    rows.textContent = rowsText(j);
    cancelBtn.hidden = TERMINAL.has(j.state) || j.state === "CANCELLING";
    results.replaceChildren(j.state === "SUCCEEDED" ? h("p", {}, "Download the predictions: ", downloads(j)) : "");
    facts.replaceChildren(dl([
      ["Job id", h("code", {}, j.id)],
      ["Model", link(`/models/${j.model_id}`, `${j.model_name} v${j.version}`)],
      ["Dataset", link(`/datasets/${j.dataset_id}`, names.get(j.dataset_id) || shortId(j.dataset_id))],
      ["Rows", rowsText(j)],
      ["Attempt", String(j.attempt)],
      ["Created", fmtDate(j.created_at)],
      ["Started", fmtDate(j.started_at)],
      ["Finished", fmtDate(j.finished_at)],
    ]));
  }
  show(job);
  cancelBtn.addEventListener("click", async () => {
    try { show(await api(`/jobs/${job.id}/cancel`, { method: "POST", signal })); toast("Cancellation requested."); } catch (err) { if (!signal.aborted) out.replaceChildren(problemBox(err)); }
  });
  while (!signal.aborted && !TERMINAL.has(job.state)) {
    await new Promise((r) => setTimeout(r, POLL_MS));
    try { job = await api(`/jobs/${job.id}`, { signal }); show(job); } catch (err) { if (signal.aborted) return; out.replaceChildren(problemBox(err)); }
  }
}

/** The "predict a whole dataset" form of a model page. */
export function batchForm(model, navigate) {
  const select = h("select#batch-dataset", { name: "dataset_id", required: true }, h("option", { value: "" }, "Loading datasets…"));
  const out = h("div#batch-status", { "aria-live": "polite" });
  listAll("/datasets", { maxPages: 5 }).then((items) => {
    select.replaceChildren(...items.map((d) => h("option", { value: d.id }, `${d.name} (${fmtNum(d.n_rows)} rows)`)));
  }).catch((err) => out.replaceChildren(problemBox(err)));
  return h("form.inline-form#batch-form", { onsubmit: async (e) => {
    e.preventDefault();
    try {
      await api("/predictions", { method: "POST", body: { model_id: model.id, dataset_id: select.value } });
      navigate("/predictions");
    } catch (err) { out.replaceChildren(problemBox(err)); }
  } }, h("label", { for: "batch-dataset" }, "Dataset"), select, h("button", { type: "submit" }, "Run over the dataset"), out);
}
