// Models: one page of GET /models with the headline held-out metrics.

import { api, qs } from "../api.js";
import { datasetNames } from "../store.js";
import { fmtDate, fmtNum, h, link, pageHeader, problemBox, shortId, table } from "../ui.js";
import { chips } from "./registry.js";

const FILTERS = [["name", "Name", "churn"], ["alias", "Alias", "champion"], ["tag", "Tag", "prod"]];

// name / alias / tag filters of GET /models, kept in the page's query string
function filterForm(params, navigate) {
  const inputs = FILTERS.map(([key, label, ph]) => [key, h(`input#filter-${key}`, { type: "text", name: key, value: params.get(key) || "", placeholder: ph, autocomplete: "off" }), label]);
  return h("form.filters#model-filters", { role: "search", onsubmit: (e) => {
    e.preventDefault();
    navigate(`/models${qs(Object.fromEntries(inputs.map(([k, el]) => [k, el.value.trim()])))}`);
  } }, inputs.map(([key, el, label]) => h("span.filter", {}, h("label", { for: `filter-${key}` }, label), el)),
  h("button", { type: "submit" }, "Filter"));
}

const PAGE_SIZE = 20;

export async function renderModels(main, { params, signal, navigate }) {
  document.title = "Models · SODM";
  const cursor = params.get("cursor") || "";
  const pageNo = Number(params.get("page") || 1);
  const compare = link("/compare", "Compare two models");
  compare.classList.add("button");
  main.append(pageHeader("Models", compare), filterForm(params, navigate));
  const filters = Object.fromEntries(FILTERS.map(([k]) => [k, params.get(k) || ""]));
  let page;
  try {
    page = await api(`/models${qs({ limit: PAGE_SIZE, cursor, ...filters })}`, { signal });
  } catch (err) {
    if (signal.aborted) return;
    main.append(problemBox(err));
    return;
  }
  let names = new Map();
  try { names = await datasetNames({ ids: page.items.map((m) => m.dataset_id), signal }); } catch (err) { if (signal.aborted) return; }
  if (!page.items.length) {
    main.append(Object.values(filters).some(Boolean)
      ? h("p.empty-state", {}, "No model matches these filters. ", link("/models", "Show all"))
      : h("p.empty-state", {}, "No models yet. ", link("/train", "Train one")));
    return;
  }
  main.append(table([
    { label: "Model", cell: (m) => link(`/models/${m.id}`, `${m.name} v${m.version}`) },
    { label: "Aliases", cell: (m) => chips(m.aliases || []) },
    { label: "Tags", cell: (m) => chips(m.tags || []) },
    { label: "Algorithm", cell: (m) => `${m.algorithm}${m.params?.kernel ? ` · ${m.params.kernel}` : ""}` },
    { label: "Dataset", cell: (m) => link(`/datasets/${m.dataset_id}`, names.get(m.dataset_id) || shortId(m.dataset_id)) },
    { label: "Accuracy", className: "num", cell: (m) => fmtNum(m.metrics?.accuracy) },
    { label: "F1", className: "num", cell: (m) => fmtNum(m.metrics?.f1) },
    { label: "ROC AUC", className: "num", cell: (m) => fmtNum(m.metrics?.roc_auc) },
    { label: "Margin mean", className: "num", cell: (m) => fmtNum(m.margin?.mean) },
    { label: "#SV", className: "num", cell: (m) => fmtNum(m.n_support_vectors) },
    { label: "Train time", className: "num", cell: (m) => `${fmtNum(m.train_seconds, 3)} s` },
    { label: "Created", cell: (m) => fmtDate(m.created_at) },
  ], page.items, { caption: "Trained models, newest first", rowAttrs: (m) => ({ dataset: { modelId: m.id } }) }));
  main.append(h("nav.pager", { "aria-label": "Model pages" },
    pageNo > 1 ? h("button.link-button", { type: "button", onclick: () => history.back() }, "← Newer") : null,
    h("span.muted", {}, `Page ${pageNo}`),
    page.next_cursor ? link(`/models${qs({ ...filters, cursor: page.next_cursor, page: pageNo + 1 })}`, "Older →") : null));
}
