// The train form: dataset, algorithm, kernel and ODM parameters (with their defaults and
// meaning), backend and test split. Submitting POSTs /train and opens the new job's live page;
// a 422 problem is shown inline next to the field it names.

import { api, listAll } from "../api.js";
import { h, link, pageHeader, problemBox, section } from "../ui.js";

const ALGORITHMS = [
  ["sodm", "SODM: stratified partitions solved in parallel and merged level by level (Wang et al., IJCAI-23)"],
  ["odm", "ODM: the exact dual coordinate descent solver on all the data"],
  ["cascade", "Ca-ODM baseline: cascade of partition solvers"],
  ["dip", "DiP-ODM baseline: distributed partitions"],
  ["dc", "DC-ODM baseline: divide and conquer"],
  ["svrg", "ODM-SVRG baseline: stochastic variance-reduced gradient (linear)"],
];

// [name, label, default, meaning, {kernels, algorithms, kind}]; a default may differ per
// algorithm ({algorithm: value, "*": value}); "" means "chosen by the solver".
const KERNEL_ALGS = ["sodm", "odm", "cascade", "dip", "dc"];
const LEVEL_ALGS = ["sodm", "cascade", "dip", "dc"];
const PARAMS = [
  ["lam", "λ (lam)", 1000, "Weight of the margin loss against model complexity ½‖w‖²; larger fits the training data harder.", { kind: "number", min: 0 }],
  ["upsilon", "υ (upsilon)", 0.5, "Relative weight of margins above the band versus below it (0 < υ ≤ 1).", { kind: "number", min: 0, max: 1 }],
  ["theta", "θ (theta)", 0.2, "Half-width of the free band [1−θ, 1+θ]: margins inside it cost nothing (0 ≤ θ < 1).", { kind: "number", min: 0, max: 1 }],
  ["gamma", "γ (gamma)", "scale", "Kernel width for rbf/poly: a number, or \"scale\" = 1 / (features · variance of X).", { kernels: ["rbf", "poly"], algorithms: KERNEL_ALGS, kind: "text" }],
  ["degree", "degree", 3, "Polynomial kernel degree.", { kernels: ["poly"], algorithms: KERNEL_ALGS, kind: "int", min: 1 }],
  ["coef0", "coef0", 1.0, "Polynomial kernel offset.", { kernels: ["poly"], algorithms: KERNEL_ALGS, kind: "number" }],
  ["p", "p", "", "Partitions merged into one at each level (SODM); the last level has p partitions. Empty: the fewest whose kernels fit the kernel cache.", { algorithms: ["sodm"], kernels: ["rbf", "poly"], kind: "int", min: 2 }],
  ["levels", "levels", { sodm: "", dc: 2, "*": 3 }, "Merge levels below the global solve (more levels: more, smaller partitions). SODM: empty = chosen from the data size.", { algorithms: LEVEL_ALGS, kind: "int", min: 0 }],
  ["n_strata", "strata", "", "Strata (landmark clusters) used to draw representative partitions. Empty: automatic.", { algorithms: ["sodm"], kind: "int", min: 1 }],
  ["n_clusters", "clusters", 20, "k-means clusters that DiP-ODM spreads over the partitions.", { algorithms: ["dip"], kind: "int", min: 1 }],
  ["fanout", "fanout", 4, "DC-ODM: fanout^level kernel k-means clusters at each level.", { algorithms: ["dc"], kind: "int", min: 2 }],
  ["sample_size", "k-means sample", 2000, "DC-ODM: rows sampled for kernel k-means.", { algorithms: ["dc"], kind: "int", min: 10 }],
  ["epochs", "epochs", "", "Passes of the SVRG solver (linear). Empty: default.", { algorithms: ["sodm", "svrg"], kernels: ["linear"], kind: "int", min: 1 }],
  ["step_size", "step size", "", "SVRG step size. Empty: derived from the data's smoothness.", { algorithms: ["sodm", "svrg"], kernels: ["linear"], kind: "number", min: 0 }],
  ["n_jobs", "parallel workers", 1, "Processes solving partitions at the same time (-1: all cores).", { algorithms: LEVEL_ALGS, kind: "int" }],
  ["tol", "tolerance", { svrg: 1e-6, "*": 0.001 }, "Stopping tolerance (KKT violation of a local solve; gradient norm for SVRG).", { kind: "number", min: 0 }],
  ["max_iter", "max iterations", 1000, "Iteration cap of each local solve.", { algorithms: KERNEL_ALGS, kind: "int", min: 1 }],
];

function defaultFor(def, algorithm) {
  if (def !== null && typeof def === "object") return algorithm in def ? def[algorithm] : def["*"];
  return def;
}

function paramApplies(spec, algorithm, kernel) {
  return (!spec.kernels || spec.kernels.includes(kernel)) && (!spec.algorithms || spec.algorithms.includes(algorithm));
}

export async function renderTrain(main, { params, signal, navigate }) {
  document.title = "Train · SODM";
  const datasets = await listAll("/datasets", { signal, maxPages: 5 });
  main.append(pageHeader("Train a model"));
  if (!datasets.length) {
    main.append(h("p.empty-state", {}, "Upload a dataset first: ", link("/datasets", "Datasets")));
    return;
  }
  const pre = params.get("dataset");
  const dsOptions = (sel) => datasets.map((d) => h("option", { value: d.id, selected: d.id === sel }, `${d.name} (${d.n_rows} × ${d.n_features})`));
  const errs = new Map(); // field -> error element
  const field = (key, id, labelText, control, help) => {
    const err = h("p.field-error", { id: `${id}-error`, hidden: true });
    errs.set(key, { err, control });
    control.setAttribute("aria-describedby", `${id}-help ${id}-error`);
    return h("div.field", { dataset: { field: key } }, h("label", { for: id }, labelText), control,
      help ? h("p.muted.small", { id: `${id}-help` }, help) : null, err);
  };

  const dataset = h("select#tr-dataset", { name: "dataset_id", required: true }, dsOptions(pre));
  const algorithm = h("select#tr-algorithm", { name: "algorithm" }, ALGORITHMS.map(([v]) => h("option", { value: v }, v)));
  const algHelp = h("span");
  const kernel = h("select#tr-kernel", { name: "kernel" }, ["rbf", "linear", "poly"].map((k) => h("option", { value: k }, k)));
  const backend = h("select#tr-backend", { name: "backend" }, h("option", { value: "local" }, "local (this machine's worker)"), h("option", { value: "spark" }, "spark (cluster)"));
  const split = h("select#tr-split", { name: "split" },
    h("option", { value: "fraction" }, "hold out a fraction of the rows"),
    h("option", { value: "dataset" }, "a separate test dataset"),
    h("option", { value: "none" }, "none (metrics on the training data)"));
  const fraction = h("input#tr-fraction", { type: "number", step: "0.05", min: "0.05", max: "0.9", value: "0.2", name: "test_fraction" });
  const testDs = h("select#tr-testds", { name: "test_dataset_id" }, dsOptions(null));
  const seed = h("input#tr-seed", { type: "number", min: "0", step: "1", value: "0", name: "seed" });
  const name = h("input#tr-name", { type: "text", name: "name", pattern: "[A-Za-z0-9][A-Za-z0-9._\\-]*", placeholder: "defaults to the dataset name" });

  const inputs = new Map();
  const paramFields = PARAMS.map(([key, label, def, meaning, spec]) => {
    const isNum = spec.kind !== "text";
    const input = h(`input#p-${key}`, { name: key, type: isNum ? "number" : "text",
      step: spec.kind === "int" ? "1" : "any", min: spec.min, max: spec.max });
    const defaultNote = h("span.default-note");
    inputs.set(key, { input, def, spec, defaultNote, shown: null });
    const wrap = field(`params.${key}`, `p-${key}`, label, input, [meaning, " ", defaultNote]);
    wrap.dataset.param = key;
    return wrap;
  });
  // each algorithm's defaults; a value the user typed is kept when the algorithm changes
  function applyDefaults() {
    for (const entry of inputs.values()) {
      const { input, def, defaultNote } = entry;
      const d = defaultFor(def, algorithm.value);
      if (entry.shown === null || input.value === String(entry.shown)) input.value = d;
      entry.shown = d;
      input.placeholder = d === "" ? "auto" : String(d);
      defaultNote.textContent = d === "" ? "" : `Default ${d}.`;
    }
  }

  const splitFraction = field("test_fraction", "tr-fraction", "Test fraction", fraction, "Share of rows held out (stratified) for the metrics.");
  const splitDataset = field("test_dataset_id", "tr-testds", "Test dataset", testDs, "Metrics are measured on this dataset.");
  function refresh() {
    applyDefaults();
    const linearOnly = algorithm.value === "svrg";
    for (const opt of kernel.options) opt.disabled = linearOnly && opt.value !== "linear";
    if (linearOnly) kernel.value = "linear";
    algHelp.textContent = ALGORITHMS.find(([v]) => v === algorithm.value)[1];
    for (const wrap of paramFields) {
      const { spec } = inputs.get(wrap.dataset.param);
      wrap.hidden = !paramApplies(spec, algorithm.value, kernel.value);
    }
    splitFraction.hidden = split.value !== "fraction";
    splitDataset.hidden = split.value !== "dataset";
  }
  for (const el of [algorithm, kernel, split]) el.addEventListener("change", refresh);

  const status = h("div#train-status", { "aria-live": "polite" });
  const submit = h("button.primary", { type: "submit" }, "Start training");
  const form = h("form.train", { novalidate: true, onsubmit: async (e) => {
    e.preventDefault();
    for (const { err, control } of errs.values()) { err.hidden = true; control.removeAttribute("aria-invalid"); }
    const body = { dataset_id: dataset.value, algorithm: algorithm.value, backend: backend.value, seed: Number(seed.value || 0), params: { kernel: kernel.value } };
    for (const [key, { input, spec }] of inputs) {
      if (!paramApplies(spec, algorithm.value, kernel.value)) continue;
      const raw = input.value.trim();
      if (raw === "") continue;
      body.params[key] = spec.kind === "text" ? (Number.isFinite(Number(raw)) ? Number(raw) : raw) : Number(raw);
    }
    if (split.value === "fraction") body.test_fraction = Number(fraction.value);
    if (split.value === "dataset") body.test_dataset_id = testDs.value;
    if (name.value.trim()) body.name = name.value.trim();
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
        const slot = errs.get(key);
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
  section("Algorithm",
    h("div.grid-2", {},
      field("algorithm", "tr-algorithm", "Algorithm", algorithm, algHelp),
      field("params.kernel", "tr-kernel", "Kernel", kernel, "rbf: exp(−γ‖x−z‖²); poly: (γ⟨x,z⟩+coef0)^degree; linear: ⟨x,z⟩."),
      field("backend", "tr-backend", "Backend", backend, "Where the solver runs."))),
  section("Parameters", h("div.grid-3", {}, paramFields)),
  h("div.form-actions", {}, submit, status));
  main.append(form);
  refresh();
}
