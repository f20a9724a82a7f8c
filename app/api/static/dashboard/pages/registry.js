// The registry part of a model page: the aliases of the model's name (point one at this
// version, remove one), this version's tags and description (PATCH /models/{id}).

import { api } from "../api.js";
import { h, link, problemBox, table, toast } from "../ui.js";

export function chips(values, cls = "chip") {
  return values.length ? h("span.chips", {}, values.map((v) => h(`span.${cls}`, {}, v))) : h("span.muted", {}, "none");
}

export function registrySection(m) {
  const out = h("div#registry-status", { "aria-live": "polite" });
  const aliasesBox = h("div#aliases");

  async function loadAliases() {
    const { items } = await api(`/models/${encodeURIComponent(m.name)}/aliases`);
    aliasesBox.replaceChildren(items.length ? table([
      { label: "Alias", cell: (a) => h("code", {}, `${m.name}@${a.alias}`) },
      { label: "Version", cell: (a) => (a.model_id === m.id ? h("strong", {}, `v${a.version} (this one)`) : link(`/models/${a.model_id}`, `v${a.version}`)) },
      { label: "", cell: (a) => h("button.link-button", { type: "button", "aria-label": `Remove alias ${a.alias}`, onclick: async () => {
        try { await api(`/models/${encodeURIComponent(m.name)}/aliases/${a.alias}`, { method: "DELETE" }); toast(`Removed ${m.name}@${a.alias}`); await loadAliases(); } catch (err) { out.replaceChildren(problemBox(err)); }
      } }, "Remove") },
    ], items, { caption: `Aliases of ${m.name}` }) : h("p.muted", {}, `No aliases for ${m.name} yet.`));
  }

  const aliasInput = h("input#alias-name", { type: "text", name: "alias", required: true, pattern: "[A-Za-z][A-Za-z0-9_\\-]{0,63}", placeholder: "champion", autocomplete: "off" });
  const aliasForm = h("form.inline-form#alias-form", { onsubmit: async (e) => {
    e.preventDefault();
    const alias = aliasInput.value.trim();
    try {
      await api(`/models/${encodeURIComponent(m.name)}/aliases/${encodeURIComponent(alias)}`, { method: "PUT", body: { model_id: m.id } });
      toast(`${m.name}@${alias} → v${m.version}`);
      aliasInput.value = "";
      out.replaceChildren();
      await loadAliases();
    } catch (err) { out.replaceChildren(problemBox(err)); }
  } }, h("label", { for: "alias-name" }, "Point an alias at this version"), aliasInput, h("button", { type: "submit" }, "Set alias"));

  const tagsInput = h("input#model-tags", { type: "text", name: "tags", value: (m.tags || []).join(", "), placeholder: "prod, team=risk", autocomplete: "off" });
  const descInput = h("textarea#model-description", { name: "description", rows: 2, maxlength: 4000 }, m.description || "");
  const labelsForm = h("form.labels-form#labels-form", { onsubmit: async (e) => {
    e.preventDefault();
    const tags = tagsInput.value.split(",").map((t) => t.trim()).filter(Boolean);
    try {
      const saved = await api(`/models/${m.id}`, { method: "PATCH", body: { tags, description: descInput.value } });
      tagsInput.value = saved.tags.join(", ");
      const lead = document.getElementById("model-lead");
      if (lead) { lead.textContent = saved.description; lead.hidden = !saved.description; }
      out.replaceChildren();
      toast("Saved tags and description");
    } catch (err) { out.replaceChildren(problemBox(err)); }
  } },
  h("label", { for: "model-description" }, "Description"), descInput,
  h("label", { for: "model-tags" }, "Tags (comma separated)"), tagsInput,
  h("button", { type: "submit" }, "Save"));

  loadAliases().catch((err) => out.replaceChildren(problemBox(err)));
  return h("div.registry", {},
    h("p.muted.small", {}, "Predict with ", h("code", {}, `"model": "${m.name}@<alias>"`), ": an alias moves only when you move it, never with a new version."),
    aliasesBox, aliasForm, labelsForm, out);
}
