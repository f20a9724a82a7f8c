// Two model versions side by side: the held-out metrics (the better value marked), the margin
// distributions, and the parameters with the differences marked. ``?a=<id>&b=<id>``; with one
// or none given, a picker (b defaults to the previous version of a's name).

import { api, listAll, qs } from "../api.js";
import { marginHistogram } from "../charts.js";
import { fmtDate, fmtNum, h, link, pageHeader, problemBox, section, shortId } from "../ui.js";

// [label, value of a model, +1 when higher is better / -1 when lower is / 0 when neither]
const ROWS = [
  ["Accuracy", (m) => m.metrics?.accuracy, 1],
  ["Precision", (m) => m.metrics?.precision, 1],
  ["Recall", (m) => m.metrics?.recall, 1],
  ["F1", (m) => m.metrics?.f1, 1],
  ["ROC AUC", (m) => m.metrics?.roc_auc, 1],
  ["Test rows", (m) => m.metrics?.n_test, 0],
  ["Margin mean", (m) => m.margin?.mean, 0],
  ["Margin variance", (m) => m.margin?.variance, -1],
  ["Support vectors", (m) => m.n_support_vectors, -1],
  ["Training time (s)", (m) => m.train_seconds, -1],
];

const label = (m) => `${m.name} v${m.version}`;

function picker(models, a, b, navigate) {
  const opts = (sel) => models.map((m) => h("option", { value: m.id, selected: m.id === sel }, `${label(m)} · ${m.algorithm} · ${shortId(m.id)}`));
  const selA = h("select#cmp-a", { name: "a" }, opts(a));
  const selB = h("select#cmp-b", { name: "b" }, opts(b));
  return h("form.filters", { "aria-label": "Models to compare", onsubmit: (e) => { e.preventDefault(); navigate(`/compare${qs({ a: selA.value, b: selB.value })}`); } },
    h("label.inline", { for: "cmp-a" }, "Model A ", selA),
    h("label.inline", { for: "cmp-b" }, "Model B ", selB),
    h("button.primary", { type: "submit" }, "Compare"));
}

function metricsTable(a, b) {
  const cell = (v) => (v === null || v === undefined ? "—" : fmtNum(v, 4));
  return h("div.table-wrap", {}, h("table.compare", {},
    h("caption.sr-only", {}, `Metrics of ${label(a)} and ${label(b)}`),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Metric"), h("th", { scope: "col" }, `A: ${label(a)}`), h("th", { scope: "col" }, `B: ${label(b)}`), h("th", { scope: "col" }, "B − A"))),
    h("tbody", {}, ROWS.map(([name, get, sense]) => {
      const va = get(a);
      const vb = get(b);
      const both = Number.isFinite(va) && Number.isFinite(vb);
      const better = both && sense !== 0 && va !== vb ? ((vb - va) * sense > 0 ? "b" : "a") : null;
      const mark = (side, v) => h(`td.num${better === side ? ".better" : ""}`, {}, cell(v), better === side ? h("span.sr-only", {}, " (better)") : null);
      return h("tr", { dataset: { metric: name } }, h("th", { scope: "row" }, name), mark("a", va), mark("b", vb),
        h("td.num", {}, both ? fmtNum(vb - va, 4) : "—"));
    }))));
}

function paramsTable(a, b) {
  const keys = [...new Set([...Object.keys(a.params || {}), ...Object.keys(b.params || {})])].sort();
  const show = (v) => (v === undefined ? "—" : JSON.stringify(v));
  return h("div.table-wrap", {}, h("table.compare", {},
    h("caption.sr-only", {}, "Parameters"),
    h("thead", {}, h("tr", {}, ["Parameter", "A", "B"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, [
      ["algorithm", a.algorithm, b.algorithm], ["backend", a.backend, b.backend],
      ...keys.map((k) => [k, a.params?.[k], b.params?.[k]]),
    ].map(([k, va, vb]) => {
      const differs = show(va) !== show(vb);
      return h(`tr${differs ? ".differs" : ""}`, { dataset: { param: k } }, h("th", { scope: "row" }, k, differs ? h("span.tag", {}, "differs") : null),
        h("td", {}, h("code", {}, show(va))), h("td", {}, h("code", {}, show(vb))));
    }))));
}

function margins(m, side) {
  if (!m.margin?.histogram) return h("p.muted", {}, "No margin statistics.");
  return h("figure.chart-box", { dataset: { chart: `margin-${side}` } },
    marginHistogram({ edges: m.margin.histogram.edges, counts: m.margin.histogram.counts, band: m.margin.band, mean: m.margin.mean }),
    h("figcaption", {}, `${side.toUpperCase()}: ${label(m)} — mean ${fmtNum(m.margin.mean, 4)}, variance ${fmtNum(m.margin.variance, 4)}`));
}

export async function renderCompare(main, { params, signal, navigate }) {
  document.title = "Compare models · SODM";
  main.append(pageHeader("Compare two models"));
  const models = await listAll("/models", { signal, maxPages: 5 });
  if (models.length < 2) {
    main.append(h("p.empty-state", {}, "Comparing needs two models. ", link("/train", "Train one")));
    return;
  }
  const a = params.get("a") || models[0].id;
  const first = models.find((m) => m.id === a);
  const previous = first && models.find((m) => m.id !== a && m.name === first.name && m.version < first.version);
  const b = params.get("b") || (previous || models.find((m) => m.id !== a)).id;
  main.append(picker(models, a, b, navigate));
  if (!params.get("a") || !params.get("b")) return;
  let ma;
  let mb;
  try {
    [ma, mb] = await Promise.all([api(`/models/${a}`, { signal }), api(`/models/${b}`, { signal })]);
  } catch (err) {
    if (!signal.aborted) main.append(problemBox(err));
    return;
  }
  document.title = `${label(ma)} vs ${label(mb)} · SODM`;
  main.append(
    section("Metrics", metricsTable(ma, mb)),
    section("Margin distributions", h("div.two-col", {}, margins(ma, "a"), margins(mb, "b"))),
    section("Parameters", paramsTable(ma, mb)),
    h("p.muted", {}, "A: ", link(`/models/${ma.id}`, label(ma)), ` (${fmtDate(ma.created_at)}) · B: `, link(`/models/${mb.id}`, label(mb)), ` (${fmtDate(mb.created_at)})`));
}
