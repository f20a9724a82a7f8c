// DOM helpers and formatting shared by the pages. Text always goes in as text nodes (never
// innerHTML), so API data cannot inject markup.

import { BASE } from "./api.js";

/** ``h("tag.class#id", {attrs, on*: handlers}, ...children)``. */
export function h(spec, attrs = {}, ...children) {
  const [, tag, rest] = /^([a-z0-9]+)(.*)$/i.exec(spec);
  const el = document.createElement(tag);
  for (const m of rest.matchAll(/([.#])([\w-]+)/g)) {
    if (m[1] === ".") el.classList.add(m[2]); else el.id = m[2];
  }
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
}

export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** Replace ``el``'s children (null/undefined/false children are left out, unlike replaceChildren). */
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** A link inside the single-page app (the router intercepts clicks on ``data-link``). */
export function link(path, ...children) {
  return h("a", { href: `${BASE}/dashboard${path}`, "data-link": true }, ...children);
}

export function fmtNum(v, digits = 4) {
  if (v === null || v === undefined || Number.isNaN(v)) return "—";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v)) return v.toLocaleString("en-US");
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
  return Number(v.toPrecision(digits)).toString();
}

export function fmtPct(v) {
  return v === null || v === undefined ? "—" : `${(100 * v).toFixed(1)}%`;
}

export function fmtDate(s) {
  if (!s) return "—";
  const d = new Date(s);
  return d.toLocaleString("en-GB", { dateStyle: "short", timeStyle: "medium" });
}

export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "—";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(m / 60)}h ${String(m % 60).padStart(2, "0")}m`;
}

export function fmtBytes(n) {
  if (!Number.isFinite(n)) return "—";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

export function shortId(id) { return id ? String(id).slice(0, 8) : "—"; }

/** Elapsed seconds of a job: started -> finished (or now while it runs). */
export function elapsedOf(job, now = Date.now()) {
  if (!job.started_at) return null;
  const end = job.finished_at ? Date.parse(job.finished_at) : now;
  return (end - Date.parse(job.started_at)) / 1000;
}

export const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);

export function stateBadge(state) {
  return h(`span.badge.state-${String(state).toLowerCase()}`, { "data-state": state }, state);
}

/** An accessible progress bar; ``update(fraction, message)`` moves it. */
export function progressBar(fraction = 0, label = "Progress") {
  const fill = h("span.bar-fill");
  const text = h("span.bar-text");
  const bar = h("div.bar", { role: "progressbar", "aria-label": label, "aria-valuemin": 0, "aria-valuemax": 100 }, fill);
  const wrap = h("div.progress", {}, bar, text);
  wrap.update = (f, state) => {
    const pct = Math.round(100 * Math.max(0, Math.min(1, f || 0)));
    fill.style.width = `${pct}%`;
    bar.setAttribute("aria-valuenow", pct);
    text.textContent = `${pct}%`;
    wrap.dataset.pct = pct;
    if (state) wrap.dataset.state = state;
  };
  wrap.update(fraction);
  return wrap;
}

/** A problem+json answer as an inline alert (title, detail, field errors, line number). */
export function problemBox(err) {
  const p = err.problem || { title: "Error", detail: String(err.message || err) };
  const items = [];
  for (const e of p.errors || []) {
    const where = e.field || (Array.isArray(e.loc) ? e.loc.join(".") : "");
    items.push(h("li", {}, where ? h("code", {}, where) : null, where ? ": " : "", e.message || e.msg || JSON.stringify(e)));
  }
  const extras = [];
  for (const k of ["line", "column", "row"]) if (p[k] !== undefined && p[k] !== null) extras.push(`${k} ${p[k]}`);
  return h("div.problem", { role: "alert" },
    h("strong", {}, p.title || "Error", err.status ? ` (${err.status})` : ""),
    p.detail ? h("p", {}, p.detail) : null,
    extras.length ? h("p.muted", {}, `At ${extras.join(", ")}`) : null,
    items.length ? h("ul", {}, items) : null);
}

let toastTimer = null;
export function toast(message) {
  const el = document.getElementById("toast");
  el.textContent = message;
  el.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { el.hidden = true; }, 4000);
}

/** A table: ``columns`` = [{label, cell(row) -> node|text, className}] */
export function table(columns, rows, { caption, rowAttrs } = {}) {
  return h("div.table-wrap", {},
    h("table", {},
      caption ? h("caption.sr-only", {}, caption) : null,
      h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.className }, c.label)))),
      h("tbody", {}, rows.map((r) => h("tr", rowAttrs ? rowAttrs(r) : {},
        columns.map((c) => h("td", { class: c.className, "data-label": c.label }, c.cell(r))))))));
}

/** Description list from [label, value] pairs. */
export function dl(pairs) {
  return h("dl.kv", {}, pairs.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

export function section(title, ...children) {
  return h("section.card", {}, h("h2", {}, title), ...children);
}

export function pageHeader(title, ...actions) {
  return h("div.page-head", {}, h("h1", {}, title), actions.length ? h("div.actions", {}, actions) : null);
}
