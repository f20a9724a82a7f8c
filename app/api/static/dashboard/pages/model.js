// Model detail: held-out metrics, confusion matrix, ROC curve (when the API gives one), the
// margin distribution y*f(x) with the band [1-theta, 1+theta], a prediction box and the file
// download.

import { api, download } from "../api.js";
import { marginHistogram, marginOverlay, rocCurve } from "../charts.js";
import { autoSearch, calibration } from "../fitinfo.js";
import { append, dl, fmtDate, fmtNum, fmtPct, h, link, pageHeader, problemBox, section, shortId, table, toast } from "../ui.js";
import { batchForm } from "./predictions.js";
import { registrySection } from "./registry.js";

/**
 * Rows typed or pasted by a person -> the API's ``instances``: a JSON array, dense rows of
 * numbers (comma/space/tab separated), or LIBSVM rows ``idx:value`` (1-based indices, an
 * optional leading label is dropped) sent as sparse rows with 0-based keys.
 */
export function parseRows(text) {
  const t = text.trim();
  if (!t) throw new Error("Paste at least one row.");
  if (t.startsWith("[") || t.startsWith("{")) {
    const v = JSON.parse(t);
    if (Array.isArray(v) && v.length && v.every((x) => typeof x === "number")) return [v];
    return Array.isArray(v) ? v : [v];
  }
  return t.split(/\n+/).map((l) => l.trim()).filter(Boolean).map((line, i) => {
    const tokens = line.split(/[\s,;]+/).filter(Boolean);
    if (tokens.some((tok) => tok.includes(":"))) {
      const row = {};
      const body = tokens[0].includes(":") ? tokens : tokens.slice(1);
      for (const tok of body) {
        const [k, v] = tok.split(":");
        const idx = Number(k);
        const val = Number(v);
        if (!Number.isInteger(idx) || idx < 1 || !Number.isFinite(val)) throw new Error(`row ${i + 1}: cannot read "${tok}" as index:value`);
        row[String(idx - 1)] = val;
      }
      return row;
    }
    return tokens.map((tok) => {
      const v = Number(tok);
      if (tok === "" || Number.isNaN(v)) throw new Error(`row ${i + 1}: "${tok}" is not a number`);
      return v;
    });
  });
}

function confusion(cm) {
  if (!cm?.labels?.length) return h("p.muted", {}, "No confusion matrix.");
  const max = Math.max(1, ...cm.matrix.flat());
  return h("div.table-wrap", {}, h("table.confusion", {},
    h("caption", {}, "Rows: true label · columns: predicted label"),
    h("thead", {}, h("tr", {}, h("td"), cm.labels.map((l) => h("th", { scope: "col" }, `pred ${l}`)))),
    h("tbody", {}, cm.matrix.map((row, i) => h("tr", {}, h("th", { scope: "row" }, `true ${cm.labels[i]}`),
      row.map((c, j) => {
        const td = h("td.num", { class: i === j ? "diag" : "off" }, c.toLocaleString("en-US"));
        td.style.setProperty("--shade", (c / max).toFixed(3));
        return td;
      }))))));
}

function metricCards(metrics) {
  const cards = [
    ["Accuracy", metrics.accuracy], ["Precision", metrics.precision], ["Recall", metrics.recall],
    ["F1", metrics.f1], ["ROC AUC", metrics.roc_auc],
  ];
  return h("div.metric-cards", {}, cards.map(([k, v]) => h("div.metric", { dataset: { metric: k } },
    h("span.metric-label", {}, k), h("span.metric-value", {}, v === null || v === undefined ? "—" : fmtNum(v, 4)))));
}

function marginSection(margin) {
  if (!margin?.histogram) return h("p.muted", {}, "No margin statistics for this model.");
  const b = margin.band || {};
  const q = margin.quantiles || {};
  return h("div.margin", {},
    h("figure.chart-box.wide", { dataset: { chart: "margin" } },
      marginHistogram({ edges: margin.histogram.edges, counts: margin.histogram.counts, band: margin.band, mean: margin.mean }),
      h("figcaption", {}, "Histogram of y·f(x) on the held-out data; the shaded band is [1−θ, 1+θ], the dashed line the mean.")),
    dl([
      ["Mean", h("strong#margin-mean", {}, fmtNum(margin.mean, 5))],
      ["Variance", h("strong#margin-variance", {}, fmtNum(margin.variance, 5))],
      ["Std", fmtNum(margin.std, 5)],
      ["θ (band)", `${fmtNum(b.theta)} → [${fmtNum(b.lower)}, ${fmtNum(b.upper)}]`],
      ["Below / inside / above band", `${fmtPct(b.below)} / ${fmtPct(b.inside)} / ${fmtPct(b.above)}`],
      ["Quantiles", ["min", "p05", "p25", "p50", "p75", "p95", "max"].filter((k) => k in q).map((k) => `${k} ${fmtNum(q[k], 3)}`).join(" · ")],
      ["Margins", `${fmtNum(margin.n)}${margin.n_problems > 1 ? ` (${margin.n_problems} one-vs-rest problems)` : ""}`],
    ]));
}

function driftText(stats) {
  if (stats.drift === true) return h("strong.bad", {}, "drift");
  if (stats.drift === false) return "no drift";
  return h("span.muted", {}, "—");
}

/** Served margins of live traffic against the held-out ones (GET /models/{id}/monitoring). */
export function monitoringSection(mon) {
  const live = mon.live;
  if (!live.n) {
    return h("p.muted#monitoring-empty", {}, `No predictions served in the last ${mon.windows_asked} windows of ${fmtNum(mon.window_seconds)} s.`);
  }
  const ref = mon.reference;
  const row = (label, key, fmt = (v) => fmtNum(v, 4)) => [label, [h("strong", {}, live[key] === null ? "—" : fmt(live[key])),
    ref && key in ref ? h("span.muted", {}, ` (training ${ref[key] === null ? "—" : fmt(ref[key])})`) : ""]];
  return h("div.monitoring", {},
    h("figure.chart-box.wide", { dataset: { chart: "margin-live" } },
      marginOverlay({ edges: mon.grid.edges, reference: ref?.counts, live: live.counts, band: mon.band }),
      h("figcaption", {}, `Served margins ŷ·f(x) of the last ${mon.windows_asked} windows (${fmtNum(live.n)} margins) against the held-out data${ref ? "" : " (no training reference: its dataset is gone)"}; the shaded band is [1−θ, 1+θ].`)),
    dl([
      row("Mean", "mean"), row("Variance", "variance"), row("Inside band", "inside", fmtPct),
      ["PSI", [h("strong#monitoring-psi", {}, live.psi === null ? "—" : fmtNum(live.psi, 4)), ` (threshold ${fmtNum(mon.psi_threshold)})`]],
      ["KS distance", live.ks === null ? "—" : fmtNum(live.ks, 4)],
      ["Drift", h("span#monitoring-drift", {}, driftText(live))],
    ]),
    h("h3", {}, "Windows"),
    table([
      { label: "Start", cell: (w) => fmtDate(w.start) },
      { label: "Margins", className: "num", cell: (w) => fmtNum(w.n) },
      { label: "Mean", className: "num", cell: (w) => fmtNum(w.mean, 4) },
      { label: "Variance", className: "num", cell: (w) => fmtNum(w.variance, 4) },
      { label: "Inside band", className: "num", cell: (w) => fmtPct(w.inside) },
      { label: "PSI", className: "num", cell: (w) => (w.psi === null ? "—" : fmtNum(w.psi, 4)) },
      { label: "Drift", cell: (w) => driftText(w) },
    ], mon.windows, { caption: "Served margins per window" }));
}

async function liveSection(m, signal) {
  const box = h("div#monitoring", { "aria-live": "polite" }, h("p.muted", {}, "Loading…"));
  api(`/models/${m.id}/monitoring`, { signal })
    .then((mon) => box.replaceChildren(monitoringSection(mon)))
    .catch((err) => { if (err?.name !== "AbortError") box.replaceChildren(problemBox(err)); });
  return box;
}

function predictBox(model) {
  const names = model.feature_names || [];
  const namedExample = names.length ? JSON.stringify(Object.fromEntries(names.slice(0, 4).map((n, i) => [n, i / 10]))) : "";
  const ta = h("textarea#predict-rows", { rows: 5, spellcheck: "false", "aria-describedby": "predict-help",
    placeholder: model.n_features <= 8 ? Array.from({ length: model.n_features }, (_, i) => (i / 10).toFixed(1)).join(", ") : "1:0.5 3:1.2 7:-0.4" });
  const out = h("div#predict-output", { "aria-live": "polite" });
  const btn = h("button.primary", { type: "submit" }, "Predict");
  return h("form.predict", {
    onsubmit: async (e) => {
      e.preventDefault();
      let instances;
      try { instances = parseRows(ta.value); } catch (err) {
        out.replaceChildren(problemBox({ problem: { title: "Cannot read the rows", detail: err.message } }));
        return;
      }
      btn.disabled = true;
      try {
        const r = await api("/predict", { method: "POST", body: { model_id: model.id, instances } });
        out.replaceChildren(table([
          { label: "Row", className: "num", cell: (i) => i + 1 },
          { label: "Label", cell: (i) => String(r.labels[i]) },
          { label: "Decision value", className: "num", cell: (i) => (Array.isArray(r.decision_values[i])
            ? r.decision_values[i].map((v) => fmtNum(v, 5)).join(", ") : fmtNum(r.decision_values[i], 5)) },
          r.probabilities ? { label: `Probabilities (${(model.classes || []).map(String).join(", ")})`, className: "num",
            cell: (i) => r.probabilities[i].map((v) => fmtNum(v, 3)).join(", ") } : null,
        ].filter(Boolean), r.labels.map((_, i) => i), { caption: "Predictions" }));
      } catch (err) {
        out.replaceChildren(problemBox(err));
      } finally {
        btn.disabled = false;
      }
    },
  },
  h("label", { for: "predict-rows" }, "Rows to predict"),
  ta,
  h("p#predict-help.muted.small", {}, `One row per line: ${model.n_features} numbers separated by commas or spaces, `,
    "or LIBSVM pairs index:value (1-based; a leading label is ignored), or a JSON array of rows",
    names.length ? [", or JSON objects keyed by the feature names (every name once), e.g. ", h("code", {}, namedExample.replace(/}$/, ", …}"))] : "", "."),
  btn, out);
}

// The URLs other clients call for this version (and for each alias pointing at it): the
// Open Inference Protocol (KServe / Triton "V2") and MLflow's scoring protocol, same key.
function clientUrls(model) {
  const base = window.location.origin;
  const refs = [`${model.name}@${model.version}`, ...(model.aliases || []).map((a) => `${model.name}@${a}`)];
  const rows = [
    ["Open Inference Protocol (V2)", h("code#v2-infer-url.wrap", {}, `POST ${base}/v2/models/${model.name}/versions/${model.version}/infer`)],
    ["V2 metadata", h("code#v2-metadata-url.wrap", {}, `GET ${base}/v2/models/${model.name}/versions/${model.version}`)],
    ["MLflow scoring", h("code#mlflow-url.wrap", {}, `POST ${base}/models/${refs[0]}/invocations`)],
  ];
  for (const ref of refs.slice(1)) {
    rows.push([`Alias ${ref.split("@")[1]}`, h("code.wrap", {}, `POST ${base}/v2/models/${ref}/infer`), " · ",
      h("code.wrap", {}, `POST ${base}/models/${ref}/invocations`)]);
  }
  return [
    h("p.muted.small", {}, "Send the API key as Authorization: Bearer <key>. V2 takes one input X of shape [rows, ",
      String(model.n_features), "] (FP64/FP32/INT) and answers label, decision_function",
      model.params?.probability ? " and probabilities" : "", "; tritonclient's HTTP client works as is. MLflow takes dataframe_split, dataframe_records, instances, inputs or text/csv."),
    dl(rows.map(([k, ...v]) => [k, v.length === 1 ? v[0] : v])),
  ];
}

export async function renderModel(main, { id, signal, navigate }) {
  const m = await api(`/models/${id}`, { signal });
  document.title = `${m.name} v${m.version} · SODM`;
  const dlBtn = h("button#download", { type: "button", onclick: async () => {
    try { toast(`Saved ${await download(`/models/${m.id}/file`, `${m.name}-v${m.version}.sodm`)}`); } catch (err) { toast(`Download failed: ${err.message}`); }
  } }, "Download model file");
  const compare = link(`/compare?a=${encodeURIComponent(m.id)}`, "Compare with…");
  compare.classList.add("button");
  compare.id = "compare";
  const onnxBtn = h("button#download-onnx", { type: "button", onclick: async () => {
    try { toast(`Saved ${await download(`/models/${m.id}/onnx`, `${m.name}-v${m.version}.onnx`)}`); } catch (err) { toast(`ONNX export failed: ${err.message}`); }
  } }, "Download ONNX");
  const metrics = m.metrics || {};
  const roc = metrics.roc_curve;
  append(main, [
    pageHeader(`${m.name} v${m.version}`, compare, dlBtn, onnxBtn),
    h("p.lead#model-lead", { hidden: !m.description }, m.description || ""),
    section(`Held-out metrics${metrics.n_test ? ` (${fmtNum(metrics.n_test)} rows)` : ""}`,
      metrics.held_out === false ? h("p.muted", {}, "Measured on the training data (no held-out set).") : null,
      metricCards(metrics),
      h("div.two-col", {},
        h("div", {}, h("h3", {}, "Confusion matrix"), confusion(metrics.confusion_matrix)),
        h("div", {}, h("h3", {}, "ROC curve"), roc?.fpr?.length
          ? h("figure.chart-box", { dataset: { chart: "roc" } }, rocCurve({ ...roc, auc: metrics.roc_auc }))
          : h("p.muted", {}, metrics.roc_auc !== null && metrics.roc_auc !== undefined
            ? `ROC AUC ${fmtNum(metrics.roc_auc)}; the API gives no curve points for this model.` : "Not available.")))),
    metrics.calibration ? section("Probabilities", calibration(metrics.calibration)) : null,
    section("Margin distribution", marginSection(m.margin)),
    section("Live margins", await liveSection(m, signal)),
    m.fit_info?.auto ? section("Automatic hyperparameters", autoSearch(m.fit_info)) : null,
    section("Predict", predictBox(m)),
    section("From other clients", ...clientUrls(m)),
    section("Batch prediction", h("p.muted.small", {}, "Runs this model over every row of a stored dataset (in the background, any size); the result downloads as Parquet or CSV."), batchForm(m, navigate)),
    section("Registry", registrySection(m)),
    section("Details", dl([
      ["Model id", h("code", {}, m.id)],
      ["Algorithm", `${m.algorithm} (${m.backend})`],
      ["Dataset", [link(`/datasets/${m.dataset_id}`, m.dataset?.name || shortId(m.dataset_id)),
        m.dataset?.n_rows !== null && m.dataset?.n_rows !== undefined ? ` · ${fmtNum(m.dataset.n_rows)} rows × ${fmtNum(m.dataset.n_features)} features` : ""]],
      ["Dataset content SHA-256", m.dataset?.content_sha256 ? h("code.wrap#dataset-sha", {}, m.dataset.content_sha256) : "—"],
      ["Job", link(`/jobs/${m.job_id}`, shortId(m.job_id))],
      ["Features", m.feature_names?.length ? [fmtNum(m.n_features), ": ", h("span#feature-names", {}, m.feature_names.join(", "))] : fmtNum(m.n_features)],
      ["Classes", (m.classes || []).map(String).join(", ")],
      ["Support vectors", fmtNum(m.n_support_vectors)],
      ["Training time", `${fmtNum(m.train_seconds, 3)} s`],
      ["Parameters", h("code", {}, JSON.stringify(m.params))],
      ["File SHA-256", h("code.wrap", {}, m.file_sha256)],
      ["Created", fmtDate(m.created_at)],
    ])),
  ]);
}
