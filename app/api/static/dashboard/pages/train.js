// The train form: dataset, algorithm, kernel and parameters, backend, test split and weights
// (a weight column of the dataset, class weights "balanced" or per label). The
// algorithms and their parameters (type, default, bounds, this server's limits, meaning) come
// from GET /algorithms, the same specs that validate POST /train. Submitting POSTs /train with
// the values that differ from the algorithm's defaults and opens the new job's live page; a
// 422 problem is shown inline next to the field it names. A grid search (values per parameter,
// k-fold CV) is optional. ``?from=<job id>`` fills the form with that job's request (re-run
// with edited parameters); ``?dataset=<id>`` preselects a dataset.

import { api, listAll } from "../api.js";
import { h, link, pageHeader, problemBox, section, shortId } from "../ui.js";

// Shown with the algorithm select and the kernel; every other parameter is a field below.
const OWN_FIELDS = new Set(["kernel"]);

function fmtDefault(v) {
  if (v === null || v === undefined) return "";
  return typeof v === "number" && Math.abs(v) > 0 && Math.abs(v) < 1e-3 ? v.toExponential() : String(v);
}

function bounds(spec) {
  const out = [];
  if (spec.minimum !== null) out.push(`≥ ${spec.minimum}`);
  if (spec.exclusive_minimum !== null) out.push(`> ${spec.exclusive_minimum}`);
  if (spec.maximum !== null) out.push(`≤ ${spec.maximum}`);
  if (spec.exclusive_maximum !== null) out.push(`< ${spec.exclusive_maximum}`);
  return out.join(", ");
}

function paramApplies(spec, kernel) {
  return !spec.kernels.length || spec.kernels.includes(kernel);
}

// An input for a parameter spec: a select for booleans and choices, a number input for plain
// numbers, a text input for numbers that also accept words ("scale", "auto").
function controlFor(spec) {
  const id = `p-${spec.name}`;
  if (spec.type === "boolean" || spec.type === "choice") {
    const values = spec.type === "boolean" ? ["true", "false"] : spec.choices;
    const opts = values.map((v) => h("option", { value: v }, v));
    if (spec.nullable) opts.unshift(h("option", { value: "" }, "auto"));
    return h(`select#${id}`, { name: spec.name }, opts);
  }
  if (spec.words.length) {
    return h(`input#${id}`, { name: spec.name, type: "text", inputmode: "decimal", autocomplete: "off" });
  }
  const max = spec.limit ? spec.limit.value : spec.maximum;
  return h(`input#${id}`, { name: spec.name, type: "number", step: spec.type === "integer" ? "1" : "any",
    min: spec.minimum ?? undefined, max: max ?? undefined });
}

// The JSON value of a control for a spec ("" = left out).
function valueOf(spec, raw) {
  if (raw === "") return "";
  if (spec.type === "boolean") return raw === "true";
  if (spec.type === "choice") return raw;
  if (spec.words.includes(raw)) return raw;
  const n = Number(raw);
  return Number.isFinite(n) ? n : raw; // the server names what is wrong with a non-number
}

// parameters a grid search may vary, with a hint of typical values
const GRID = [
  ["lam", "lam", "e.g. 10, 100, 1000"],
  ["gamma", "gamma", "e.g. 0.1, 1, scale"],
  ["theta", "theta", "e.g. 0.1, 0.3"],
  ["upsilon", "upsilon", "e.g. 0.3, 0.7"],
];

/** "1: 20, -1: 1" -> {"1": 20, "-1": 1}; text that is not such pairs is sent as it is (the
 * server's 422 names what is wrong with it at the class weight field). */
export function classWeights(text) {
  const pairs = text.split(/[,;]+/).map((p) => p.trim()).filter(Boolean);
  const out = {};
  for (const pair of pairs) {
    const m = pair.match(/^(.+?)\s*[:=]\s*(\S+)$/);
    if (!m || !Number.isFinite(Number(m[2]))) return text.trim();
    out[m[1].trim()] = Number(m[2]);
  }
  return out;
}

/** "1, 10, scale" -> [1, 10, "scale"] (numbers where they parse). */
export function gridValues(text) {
  return text.split(/[,\s]+/).filter(Boolean).map((v) => (Number.isFinite(Number(v)) ? Number(v) : v));
}

export async function renderTrain(main, { params, signal, navigate }) {
  document.title = "Train · SODM";
  const fromId = params.get("from");
  const [datasets, algs, from] = await Promise.all([listAll("/datasets", { signal, maxPages: 5 }),
    api("/algorithms", { signal }), fromId ? api(`/jobs/${fromId}`, { signal }) : null]);
  const ALGS = new Map(algs.items.map((a) => [a.name, a]));
  main.append(pageHeader(from ? `Re-run job ${from.name || shortId(from.id)}` : "Train a model"));
  if (from) main.append(h("p.muted", {}, "The form holds the parameters of job ", link(`/jobs/${from.id}`, shortId(from.id)), "; edit them and start a new job (the original is unchanged)."));
  if (!datasets.length) {
    main.append(h("p.empty-state", {}, "Upload a dataset first: ", link("/datasets", "Datasets")));
    return;
  }
  const pre = params.get("dataset");
  // only ready datasets can be trained on (a parsing or failed one is a 409)
  const dsOptions = (sel) => datasets.filter((d) => !d.state || d.state === "ready").map((d) => h("option", { value: d.id, selected: d.id === sel }, `${d.name} (${d.n_rows} × ${d.n_features})`));
  const errs = new Map(); // field -> error element
  const field = (key, id, labelText, control, help) => {
    const err = h("p.field-error", { id: `${id}-error`, hidden: true });
    errs.set(key, { err, control });
    control.setAttribute("aria-describedby", `${id}-help ${id}-error`);
    return h("div.field", { dataset: { field: key } }, h("label", { for: id }, labelText), control,
      help ? h("p.muted.small", { id: `${id}-help` }, help) : null, err);
  };

  const dataset = h("select#tr-dataset", { name: "dataset_id", required: true }, dsOptions(pre));
  const algorithm = h("select#tr-algorithm", { name: "algorithm" }, algs.items.map((a) => h("option", { value: a.name }, `${a.name} (${a.title})`)));
  const algHelp = h("span");
  const kernel = h("select#tr-kernel", { name: "kernel" }, ["rbf", "linear", "poly"].map((k) => h("option", { value: k }, k)));
  const specOf = (name) => ALGS.get(algorithm.value).params.find((p) => p.name === name);
  const backend = h("select#tr-backend", { name: "backend" }, h("option", { value: "local" }, "local (this machine's worker)"), h("option", { value: "spark" }, "spark (cluster)"));
  const split = h("select#tr-split", { name: "split" },
    h("option", { value: "fraction" }, "hold out a fraction of the rows"),
    h("option", { value: "dataset" }, "a separate test dataset"),
    h("option", { value: "none" }, "none (metrics on the training data)"));
  const fraction = h("input#tr-fraction", { type: "number", step: "0.05", min: "0.05", max: "0.9", value: "0.2", name: "test_fraction" });
  const testDs = h("select#tr-testds", { name: "test_dataset_id" }, dsOptions(null));
  const seed = h("input#tr-seed", { type: "number", min: "0", step: "1", value: "0", name: "seed" });
  const weightColumn = h("input#tr-weight", { type: "text", name: "weight_column", autocomplete: "off", placeholder: "none" });
  const cwMode = h("select#tr-cw", { name: "class_weight" }, h("option", { value: "" }, "none (every row weighs 1)"),
    h("option", { value: "balanced" }, "balanced (n / (classes × rows of the class))"), h("option", { value: "labels" }, "per label"));
  const cwLabels = h("input#tr-cw-labels", { type: "text", name: "class_weight_labels", autocomplete: "off", placeholder: "e.g. 1: 20, -1: 1" });
  const cwHint = h("span");
  const name = h("input#tr-name", { type: "text", name: "name", pattern: "[A-Za-z0-9][A-Za-z0-9._\\-]*", placeholder: "defaults to the dataset name" });

  // one field per parameter name of any algorithm; each algorithm shows the ones it has
  const inputs = new Map();
  const basic = [];
  const advanced = [];
  for (const a of algs.items) {
    for (const spec of a.params) {
      if (OWN_FIELDS.has(spec.name) || inputs.has(spec.name)) continue;
      const input = controlFor(spec);
      const note = h("span.default-note");
      // the API's "null" (the solver chooses) is an empty field here
      const meaning = spec.description.replace(/\bnull\b/g, "empty");
      const wrap = field(`params.${spec.name}`, `p-${spec.name}`, spec.name, input, [meaning, " ", note]);
      wrap.dataset.param = spec.name;
      inputs.set(spec.name, { input, note, wrap, shown: null });
      (spec.advanced ? advanced : basic).push(wrap);
    }
  }
  // each algorithm's defaults; a value the user typed is kept when the algorithm changes
  function applyDefaults() {
    for (const [name, entry] of inputs) {
      const spec = specOf(name);
      if (!spec) continue;
      const { input, note } = entry;
      const d = fmtDefault(spec.default);
      if (entry.shown === null || input.value === entry.shown) input.value = d;
      entry.shown = d;
      if (input.tagName === "INPUT") input.placeholder = d === "" ? "auto" : d;
      const limit = spec.limit ? ` At most ${spec.limit.value} on this server.` : "";
      const range = bounds(spec);
      note.textContent = `${d === "" ? "Default: chosen by the solver." : `Default ${d}.`}${range ? ` Range ${range}.` : ""}${limit}`;
    }
  }
  const more = h("details.more-params", {}, h("summary", {}, "More parameters"), h("div.grid-3", {}, advanced));

  const cwLabelsField = field("class_weight_labels", "tr-cw-labels", "Weight per label", cwLabels, ["label: weight, …; other labels weigh 1. ", cwHint]);
  const splitFraction = field("test_fraction", "tr-fraction", "Test fraction", fraction, "Share of rows held out (stratified) for the metrics.");
  const splitDataset = field("test_dataset_id", "tr-testds", "Test dataset", testDs, "Metrics are measured on this dataset.");
  function refresh() {
    applyDefaults();
    const kernels = specOf("kernel").choices;
    for (const opt of kernel.options) opt.disabled = !kernels.includes(opt.value);
    if (!kernels.includes(kernel.value)) kernel.value = kernels[0];
    algHelp.textContent = ALGS.get(algorithm.value).description;
    for (const [name, { wrap }] of inputs) {
      const spec = specOf(name);
      wrap.hidden = !spec || !paramApplies(spec, kernel.value);
    }
    more.hidden = advanced.every((w) => w.hidden);
    splitFraction.hidden = split.value !== "fraction";
    splitDataset.hidden = split.value !== "dataset";
    cwLabelsField.hidden = cwMode.value !== "labels";
    const ds = datasets.find((d) => d.id === dataset.value);
    cwHint.textContent = ds?.classes ? `Labels of this dataset: ${Object.entries(ds.classes).map(([l, n]) => `${l} (${n} rows)`).join(", ")}.` : "";
    gridBox.hidden = !gridOn.checked;
  }

  const gridOn = h("input#grid-on", { type: "checkbox", name: "search" });
  const folds = h("input#grid-folds", { type: "number", min: "2", max: "20", step: "1", value: "3", name: "folds" });
  const gridInputs = new Map(GRID.map(([key, , hint]) => [key, h(`input#grid-${key}`, { type: "text", name: `grid_${key}`, placeholder: hint })]));
  const gridBox = h("div.grid-3", {},
    GRID.map(([key, label]) => field(`search.grid.${key}`, `grid-${key}`, `${label} values`, gridInputs.get(key), "Comma-separated; empty: not searched.")),
    field("search.folds", "grid-folds", "CV folds", folds, "Stratified folds of the training part."));
  for (const el of [algorithm, kernel, split, gridOn, cwMode, dataset]) el.addEventListener("change", refresh);

  const status = h("div#train-status", { "aria-live": "polite" });
  const submit = h("button.primary", { type: "submit" }, "Start training");
  const form = h("form.train", { novalidate: true, onsubmit: async (e) => {
    e.preventDefault();
    for (const { err, control } of errs.values()) { err.hidden = true; control.removeAttribute("aria-invalid"); }
    const body = { dataset_id: dataset.value, algorithm: algorithm.value, backend: backend.value, seed: Number(seed.value || 0), params: { kernel: kernel.value } };
    for (const [key, { input }] of inputs) {
      const spec = specOf(key);
      if (!spec || !paramApplies(spec, kernel.value)) continue;
      const raw = input.value.trim();
      if (raw === fmtDefault(spec.default)) continue; // the default: left out
      const value = valueOf(spec, raw);
      if (value === "") continue;
      body.params[key] = value;
    }
    if (gridOn.checked) {
      const grid = {};
      for (const [key, input] of gridInputs) if (input.value.trim()) grid[key] = gridValues(input.value);
      body.search = { grid, folds: Number(folds.value || 3) };
    }
    if (split.value === "fraction") body.test_fraction = Number(fraction.value);
    if (split.value === "dataset") body.test_dataset_id = testDs.value;
    if (name.value.trim()) body.name = name.value.trim();
    if (weightColumn.value.trim()) body.weight_column = weightColumn.value.trim();
    if (cwMode.value === "balanced") body.class_weight = "balanced";
    if (cwMode.value === "labels" && cwLabels.value.trim()) body.class_weight = classWeights(cwLabels.value);
    submit.disabled = true;
    status.replaceChildren(h("p.muted", {}, "Submitting…"));
    try {
      const job = await api("/train", { method: "POST", body });
      navigate(`/jobs/${job.id}`);
    } catch (err) {
      status.replaceChildren(problemBox(err));
      let first = null;
      for (const fe of err.problem?.errors || []) {
        const key = fe.field || (Array.isArray(fe.loc) ? fe.loc.filter((x) => x !== "body").join(".") : "");
        // a class weight problem is shown at the per-label input when that is what was sent
        const perLabel = key.startsWith("class_weight") && cwMode.value === "labels";
        const slot = errs.get(perLabel ? "class_weight_labels" : key);
        if (!slot) continue;
        slot.err.textContent = fe.message || fe.msg;
        slot.err.hidden = false;
        slot.control.setAttribute("aria-invalid", "true");
        first = first || slot.control;
      }
      if (first) first.focus();
    } finally {
      submit.disabled = false;
    }
  } },
  section("Data",
    h("div.grid-2", {},
      field("dataset_id", "tr-dataset", "Training dataset", dataset),
      field("split", "tr-split", "Test data", split),
      splitFraction, splitDataset,
      field("seed", "tr-seed", "Seed", seed, "Seeds the split and the solver's random choices (reproducible runs)."),
      field("name", "tr-name", "Model name", name, "Letters, digits, . _ -; each run adds a version."))),
  section("Weights",
    h("div.grid-2", {},
      field("weight_column", "tr-weight", "Weight column", weightColumn, "A column of a CSV or Parquet dataset holding each row's weight (≥ 0; 0 leaves the row out). It is taken out of the features; a test dataset needs it too."),
      field("class_weight", "tr-cw", "Class weights", cwMode, "Weights each class's rows in the loss; the CV of a search or of \"auto\" then scores balanced accuracy."),
      cwLabelsField)),
  section("Algorithm",
    h("div.grid-2", {},
      field("algorithm", "tr-algorithm", "Algorithm", algorithm, algHelp),
      field("params.kernel", "tr-kernel", "Kernel", kernel, "rbf: exp(−γ‖x−z‖²); poly: (γ⟨x,z⟩+coef0)^degree; linear: ⟨x,z⟩."),
      field("backend", "tr-backend", "Backend", backend, "Where the solver runs."))),
  section("Parameters", h("div.grid-3", {}, basic), more),
  section("Grid search",
    h("div.checkbox", {}, gridOn, h("label", { for: "grid-on" }, "Search a grid of values by cross-validation")),
    h("p.muted.small", {}, "Every combination of the listed values is scored by k-fold CV accuracy on the training part; the best is refitted on the whole training part (on either backend)."),
    gridBox),
  h("div.form-actions", {}, submit, status));
  main.append(form);
  refresh();
  if (from) fillFrom(from.request || {});

  // the form as the job ``from`` was requested (its values stay when the algorithm changes)
  function fillFrom(req) {
    if (req.dataset_id && [...dataset.options].some((o) => o.value === req.dataset_id)) dataset.value = req.dataset_id;
    if (req.algorithm && ALGS.has(req.algorithm)) algorithm.value = req.algorithm;
    if (req.backend) backend.value = req.backend;
    const p = req.params || {};
    refresh();
    if (p.kernel) kernel.value = p.kernel;
    refresh();
    for (const [key, { input }] of inputs) if (key in p && p[key] !== null) input.value = String(p[key]);
    seed.value = String(req.seed ?? 0);
    if (req.name) name.value = req.name;
    if (req.weight_column) weightColumn.value = req.weight_column;
    if (req.class_weight === "balanced") cwMode.value = "balanced";
    else if (req.class_weight && typeof req.class_weight === "object") {
      cwMode.value = "labels";
      cwLabels.value = Object.entries(req.class_weight).map(([l, w]) => `${l}: ${w}`).join(", ");
    }
    if (req.test_dataset_id) { split.value = "dataset"; testDs.value = req.test_dataset_id; } else { split.value = "fraction"; fraction.value = String(req.test_fraction ?? 0.2); }
    if (req.search?.grid) {
      gridOn.checked = true;
      for (const [key, values] of Object.entries(req.search.grid)) if (gridInputs.has(key)) gridInputs.get(key).value = values.join(", ");
      folds.value = String(req.search.folds ?? 3);
    }
    refresh();
  }
}
