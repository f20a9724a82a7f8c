// Job detail: parameters, live state and progress from GET /jobs/{id}/events (server-sent
// events read with fetch streaming so the Bearer header goes along), the per-level (or
// per-epoch) convergence charts, the error of a failed job, the cancel button and a link that
// re-runs the job with edited parameters (the train form, filled from this job). A batch
// prediction job has its own page (predictions.js).

import { api, streamEvents } from "../api.js";
import { lineChart } from "../charts.js";
import { autoSearch } from "../fitinfo.js";
import { renderPredictionJob } from "./predictions.js";
import {
  TERMINAL, dl, elapsedOf, fill, fmtDate, fmtDuration, fmtNum, fmtPct, h, link, pageHeader,
  problemBox, progressBar, section, shortId, stateBadge, toast,
} from "../ui.js";

const RECONNECT_MS = 2000;
const REFETCH_MIN_MS = 700;

/** x values and axis name of a history: levels, epochs, or plain step numbers. */
export function historyAxis(history) {
  const inc = (k) => history.length && history.every((r, i) => Number.isFinite(r[k]) && (i === 0 || r[k] > history[i - 1][k]));
  if (inc("level")) return { xs: history.map((r) => r.level), name: "level" };
  if (inc("epoch")) return { xs: history.map((r) => r.epoch), name: "epoch" };
  return { xs: history.map((_, i) => i + 1), name: "step" };
}

function convergence(history, finished) {
  const { xs, name } = historyAxis(history);
  const series = (k) => history.map((r) => (typeof r[k] === "number" ? r[k] : NaN));
  const charts = [
    ["Objective", "objective", series("objective"), "series-1", false],
    ["KKT violation", "kkt", series("kkt_violation"), "series-2", "auto"],
    ["Validation accuracy", "val", series("val_accuracy"), "series-3", false],
  ];
  if (history.some((r) => typeof r.grad_norm === "number") && !history.some((r) => typeof r.kkt_violation === "number")) {
    charts[1] = ["Gradient norm", "kkt", series("grad_norm"), "series-2", "auto"];
  }
  return h("div.charts", {}, charts.map(([title, key, ys, color, log]) => h("figure.chart-box", { dataset: { chart: key } },
    lineChart({ title, xs, ys, xLabel: name, yLabel: title, color, log, emptyText: finished ? "not recorded for this job" : "no data yet" }),
    h("figcaption", {}, title))));
}

export async function renderJob(main, { id, signal }) {
  document.title = `Job ${shortId(id)} · SODM`;
  let job = await api(`/jobs/${id}`, { signal });
  if (job.kind === "predict") return renderPredictionJob(main, job, { signal });

  const badge = h("span");
  const bar = progressBar(0, "Job progress");
  const message = h("p.progress-message", { "aria-live": "polite" });
  const elapsed = h("span");
  const sparkLine = h("p.muted.spark-progress#spark-progress", { "aria-live": "polite" });
  const cancelBtn = h("button.danger#cancel", { type: "button" }, "Cancel job");
  const rerun = link(`/train?from=${encodeURIComponent(job.id)}`, "Re-run with edits");
  rerun.classList.add("button");
  rerun.id = "rerun";
  const modelSlot = h("div");
  const errorSlot = h("div");
  const chartSlot = h("div");
  const autoSlot = h("div");
  const facts = h("div");
  const streamNote = h("p.muted.small");

  main.append(
    pageHeader(`Job ${job.name ? `${job.name} · ` : ""}${shortId(job.id)}`, badge, rerun, cancelBtn),
    h("section.card.live-status", {}, bar, message, h("p.muted", {}, "Elapsed ", elapsed), sparkLine, modelSlot, streamNote),
    errorSlot,
    autoSlot,
    section("Convergence", chartSlot),
    section("Details", facts),
  );

  function paramsTable(params) {
    const entries = Object.entries(params || {});
    if (!entries.length) return h("p.muted", {}, "Defaults for every parameter.");
    return dl(entries.map(([k, v]) => [k, h("code", {}, typeof v === "object" ? JSON.stringify(v) : String(v))]));
  }

  // the automatic hyperparameter search: announced while it runs, its result from the model
  let autoShown = "";
  async function showAuto(j) {
    const autos = Object.entries(j.params || {}).filter(([, v]) => v === "auto").map(([k]) => k);
    const key = `${autos}:${j.model_id || ""}`;
    if (!autos.length || key === autoShown) return;
    autoShown = key;
    const head = h("p.muted", {}, `${autos.join(", ")} chosen by cross-validation on the training data before the final fit.`);
    autoSlot.replaceChildren(section("Automatic hyperparameters", head));
    if (!j.model_id) return;
    try {
      const m = await api(`/models/${j.model_id}`, { signal });
      const body = autoSearch(m.fit_info);
      if (body) autoSlot.replaceChildren(section("Automatic hyperparameters", head, body));
    } catch (err) {
      if (!signal.aborted) autoSlot.replaceChildren(section("Automatic hyperparameters", head, problemBox(err)));
    }
  }

  // backend spark: the application (classic) or Connect session, and the running stage
  function sparkText(s) {
    if (!s) return "";
    const where = s.mode === "connect" ? `Spark Connect session ${s.session_id || "?"}` : `Spark application ${s.application_id || "?"}`;
    const stage = s.stage_id === null || s.stage_id === undefined ? "no stage running" : `stage ${s.stage_id}: ${s.tasks_done} of ${s.tasks_total} tasks`;
    return `${where} · ${stage} · ${s.stages_done} stages done`;
  }

  let historyKey = "";
  function show(j) {
    job = j;
    badge.replaceChildren(stateBadge(j.state));
    bar.update(j.state === "SUCCEEDED" ? 1 : j.progress?.fraction, j.state);
    message.textContent = j.progress?.message || j.state.toLowerCase();
    elapsed.textContent = fmtDuration(elapsedOf(j));
    sparkLine.textContent = sparkText(j.progress?.spark);
    sparkLine.hidden = !j.progress?.spark;
    cancelBtn.hidden = TERMINAL.has(j.state) || j.state === "CANCELLING";
    modelSlot.replaceChildren(j.model_id ? h("p", {}, link(`/models/${j.model_id}`, "Open the trained model →")) : "");
    errorSlot.replaceChildren(j.state === "FAILED" && j.error
      ? h("section.card", {}, h("h2", {}, "Error"), problemBox({ problem: j.error, status: j.error.status })) : "");
    showAuto(j);
    const hist = j.history || [];
    const key = `${hist.length}:${TERMINAL.has(j.state)}`;
    if (key !== historyKey) {
      historyKey = key;
      chartSlot.replaceChildren(convergence(hist, TERMINAL.has(j.state)));
    }
    const req = j.request || {};
    fill(facts,
      dl([
        ["Job id", h("code", {}, j.id)],
        ["Algorithm", j.algorithm],
        ["Backend", j.backend],
        ["Dataset", link(`/datasets/${j.dataset_id}`, shortId(j.dataset_id))],
        ["Test data", j.test_dataset_id ? link(`/datasets/${j.test_dataset_id}`, shortId(j.test_dataset_id))
          : req.test_fraction ? `${fmtPct(req.test_fraction)} held out (seed ${req.seed ?? 0})` : "the training data"],
        req.search ? ["Grid search", h("code", {}, JSON.stringify(req.search))] : null,
        ["Attempt", `${j.attempt} of ${j.max_attempts}`],
        ["Created", fmtDate(j.created_at)],
        ["Started", fmtDate(j.started_at)],
        ["Finished", fmtDate(j.finished_at)],
      ]),
      h("h3", {}, "Parameters"),
      paramsTable(j.params),
      (j.history || []).length ? h("h3", {}, "Last record") : null,
      (j.history || []).length ? dl(Object.entries(j.history[j.history.length - 1]).map(([k, v]) => [k, typeof v === "number" ? fmtNum(v, 6) : v === null ? "—" : String(v)])) : null,
    );
  }
  show(job);

  cancelBtn.addEventListener("click", async () => {
    cancelBtn.disabled = true;
    try {
      show(await api(`/jobs/${id}/cancel`, { method: "POST", signal }));
      toast("Cancellation requested.");
    } catch (err) {
      if (signal.aborted) return;
      errorSlot.replaceChildren(problemBox(err));
    } finally {
      cancelBtn.disabled = false;
    }
  });

  // re-read the job (history, timestamps) at most every REFETCH_MIN_MS while events arrive
  let lastFetch = 0;
  let pending = null;
  async function refetch() {
    if (pending) return pending;
    const wait = Math.max(0, lastFetch + REFETCH_MIN_MS - Date.now());
    pending = new Promise((r) => setTimeout(r, wait)).then(async () => {
      lastFetch = Date.now();
      try { if (!signal.aborted) show(await api(`/jobs/${id}`, { signal })); } catch (err) { if (!signal.aborted) streamNote.textContent = err.message; }
    }).finally(() => { pending = null; });
    return pending;
  }

  const clock = setInterval(() => { elapsed.textContent = fmtDuration(elapsedOf(job)); }, 1000);
  signal.addEventListener("abort", () => clearInterval(clock));

  // live updates: the SSE stream ends at a terminal state; reconnect if it drops before
  (async () => {
    while (!signal.aborted && !TERMINAL.has(job.state)) {
      try {
        streamNote.textContent = "Live: following server events.";
        await streamEvents(`/jobs/${id}/events`, (name, data) => {
          if (name === "progress") {
            bar.update(data.fraction, data.state);
            message.textContent = data.message || "";
            if (data.spark) { sparkLine.textContent = sparkText(data.spark); sparkLine.hidden = false; }
          } else if (name === "state") {
            badge.replaceChildren(stateBadge(data.state));
            cancelBtn.hidden = TERMINAL.has(data.state) || data.state === "CANCELLING";
            if (TERMINAL.has(data.state)) streamNote.textContent = `Finished: ${data.state.toLowerCase()}.`;
          }
          refetch();
        }, signal);
        await refetch();
      } catch (err) {
        if (signal.aborted || err.name === "AbortError") return;
        if (err.status === 404) { streamNote.textContent = "This job no longer exists."; return; }
        streamNote.textContent = `Connection lost (${err.message}); reconnecting…`;
        await new Promise((r) => setTimeout(r, RECONNECT_MS));
        await refetch();
      }
    }
    if (!signal.aborted) streamNote.textContent = `Finished: ${job.state.toLowerCase()}.`;
  })();
}
