// Datasets: the list, the upload form (XHR upload progress; the API's validation problem shown
// inline) and one dataset's summary (rows, features, class balance), its models and jobs.

import { api, listAll, upload } from "../api.js";
import { classBars } from "../charts.js";
import { forgetDatasets } from "../store.js";
import { dl, fmtBytes, fmtDate, fmtNum, h, link, pageHeader, problemBox, progressBar, section, shortId, stateBadge, table, toast } from "../ui.js";

function uploadForm(onDone) {
  // no ``accept`` filter: the API takes any file name (the format field names the format of a
  // file without a known extension, such as LIBSVM's heart_scale), and .gz / .xz of each
  const file = h("input#ds-file", { type: "file", name: "file", required: true, "aria-describedby": "ds-file-help" });
  const name = h("input#ds-name", { type: "text", name: "name", placeholder: "defaults to the file name" });
  const format = h("select#ds-format", { name: "format" },
    [["", "from the file name"], ["libsvm", "LIBSVM / svmlight"], ["csv", "CSV / TSV"], ["parquet", "Parquet"]].map(([v, t]) => h("option", { value: v }, t)));
  const label = h("input#ds-label", { type: "text", name: "label_column", placeholder: "label" });
  const bar = progressBar(0, "Upload progress");
  bar.hidden = true;
  const sizeNote = h("span.muted.small");
  const result = h("div#upload-result", { "aria-live": "polite" });
  const btn = h("button.primary", { type: "submit" }, "Upload");
  file.addEventListener("change", () => {
    const f = file.files[0];
    sizeNote.textContent = f ? fmtBytes(f.size) : "";
    if (f && !name.value) name.placeholder = f.name;
  });
  return h("form.upload", {
    onsubmit: async (e) => {
      e.preventDefault();
      const f = file.files[0];
      if (!f) return;
      const form = new FormData();
      form.append("file", f, f.name);
      if (name.value.trim()) form.append("name", name.value.trim());
      if (format.value) form.append("format", format.value);
      if (label.value.trim()) form.append("label_column", label.value.trim());
      btn.disabled = true;
      bar.hidden = false;
      bar.update(0);
      result.replaceChildren(h("p.muted", {}, `Uploading ${f.name}…`));
      try {
        const ds = await upload("/datasets", form, (loaded, total) => bar.update(loaded / total));
        bar.update(1);
        forgetDatasets();
        // 202: the parse goes on in the background; the list shows its state
        result.replaceChildren(ds.state === "parsing"
          ? h("p.success", {}, "Uploaded ", link(`/datasets/${ds.id}`, ds.name), ": still parsing (its state in the list below says when it is ready).")
          : h("p.success", {}, "Uploaded ", link(`/datasets/${ds.id}`, ds.name),
            `: ${fmtNum(ds.n_rows)} rows, ${fmtNum(ds.n_features)} features.`));
        toast(`Dataset ${ds.name} uploaded.`);
        e.target.reset();
        sizeNote.textContent = "";
        onDone(ds);
      } catch (err) {
        bar.hidden = true;
        result.replaceChildren(problemBox(err));
      } finally {
        btn.disabled = false;
      }
    },
  },
  h("div.field", {}, h("label", { for: "ds-file" }, "File (LIBSVM, CSV or Parquet)"), file, sizeNote,
    h("p#ds-file-help.muted.small", {}, "LIBSVM / svmlight (.libsvm .svm .svmlight .txt .t .scale), CSV or TSV (.csv .tsv), Parquet (.parquet .pq), each also compressed as .gz or .xz. Any other name: choose the format below.")),
  h("div.grid-2", {},
    h("div.field", {}, h("label", { for: "ds-name" }, "Name"), name),
    h("div.field", {}, h("label", { for: "ds-format" }, "Format"), format),
    h("div.field", {}, h("label", { for: "ds-label" }, "Label column (CSV / Parquet)"), label)),
  btn, bar, result);
}

function classSummary(classes) {
  const entries = Object.entries(classes || {});
  return entries.length > 4 ? `${entries.length} classes` : entries.map(([k, v]) => `${k}: ${fmtNum(v)}`).join(" · ");
}

export async function renderDatasets(main, { signal }) {
  document.title = "Datasets · SODM";
  const listSlot = h("div#datasets-table");
  main.append(pageHeader("Datasets"),
    section("Upload a dataset", uploadForm(() => load())),
    section("Your datasets", listSlot));
  async function load() {
    try {
      const items = await listAll("/datasets", { signal, maxPages: 5 });
      listSlot.replaceChildren(items.length ? table([
        { label: "Name", cell: (d) => link(`/datasets/${d.id}`, d.name) },
        { label: "Format", cell: (d) => d.format },
        { label: "State", cell: (d) => stateBadge(d.state || "ready") },
        { label: "Rows", className: "num", cell: (d) => fmtNum(d.n_rows) },
        { label: "Features", className: "num", cell: (d) => fmtNum(d.n_features) },
        { label: "Classes", cell: (d) => classSummary(d.classes) },
        { label: "Created", cell: (d) => fmtDate(d.created_at) },
      ], items, { caption: "Datasets", rowAttrs: (d) => ({ dataset: { datasetId: d.id } }) })
        : h("p.empty-state", {}, "No datasets yet: upload one above."));
    } catch (err) {
      if (!signal.aborted) listSlot.replaceChildren(problemBox(err));
    }
  }
  await load();
}

export async function renderDataset(main, { id, signal, navigate }) {
  const d = await api(`/datasets/${id}`, { signal });
  document.title = `${d.name} · SODM`;
  const del = h("button.danger", { type: "button", onclick: async () => {
    if (!window.confirm(`Delete dataset ${d.name}?`)) return;
    try {
      await api(`/datasets/${id}`, { method: "DELETE" });
      forgetDatasets();
      toast(`Deleted ${d.name}.`);
      navigate("/datasets");
    } catch (err) { main.append(problemBox(err)); }
  } }, "Delete");
  const modelsSlot = h("div#dataset-models", {}, h("p.muted", {}, "Loading…"));
  const train = link(`/train?dataset=${encodeURIComponent(id)}`, "Train on this dataset");
  train.classList.add("button", "primary");
  main.append(pageHeader(d.name, train, del),
    section("Summary", dl([
      ["Rows", h("strong", {}, fmtNum(d.n_rows))],
      ["Features", h("strong", {}, fmtNum(d.n_features))],
      ["State", stateBadge(d.state || "ready")],
      ["Format", d.format],
      d.size_bytes !== undefined ? ["Size", fmtBytes(d.size_bytes)] : null,
      d.sparse !== undefined ? ["Stored as", d.sparse ? "sparse" : "dense"] : null,
      ["Dataset id", h("code", {}, d.id)],
      d.content_sha256 ? ["Content SHA-256", h("code.wrap#content-sha", {}, d.content_sha256)] : null,
      d.duplicate_of ? ["Same content as", link(`/datasets/${d.duplicate_of}`, shortId(d.duplicate_of))] : null,
      ["Created", fmtDate(d.created_at)],
    ])),
    ...[d.state === "failed" && d.problem ? section("Why it was refused", problemBox({ problem: d.problem, status: d.problem.status })) : null,
      d.state === "parsing" ? h("p.muted", {}, "This upload is still being parsed: reload the page to see its rows and classes.") : null].filter(Boolean),
    section("Class balance", classBars(d.classes)),
    section("Models trained on it", modelsSlot),
    h("p", {}, link(`/jobs?dataset_id=${encodeURIComponent(id)}`, "Jobs on this dataset →")));
  try {
    // newest versions first; filtered here too in case the API ignores dataset_id
    const page = await api(`/models?dataset_id=${encodeURIComponent(id)}&limit=100`, { signal });
    const items = page.items.filter((m) => m.dataset_id === id);
    modelsSlot.replaceChildren(items.length ? table([
      { label: "Model", cell: (m) => link(`/models/${m.id}`, `${m.name} v${m.version}`) },
      { label: "Algorithm", cell: (m) => `${m.algorithm}${m.params?.kernel ? ` · ${m.params.kernel}` : ""}` },
      { label: "Accuracy", className: "num", cell: (m) => fmtNum(m.metrics?.accuracy) },
      { label: "Margin mean", className: "num", cell: (m) => fmtNum(m.margin?.mean) },
      { label: "Created", cell: (m) => fmtDate(m.created_at) },
    ], items, { caption: `Models trained on ${d.name}`, rowAttrs: (m) => ({ dataset: { modelId: m.id } }) })
      : h("p.empty-state", {}, "No model trained on this dataset yet."));
  } catch (err) {
    if (!signal.aborted) modelsSlot.replaceChildren(problemBox(err));
  }
}
