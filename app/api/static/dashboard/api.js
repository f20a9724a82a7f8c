// The JSON API client: the API key (this tab, or the browser when kept), Bearer requests, problem+json errors,
// server-sent events over fetch streaming (EventSource cannot send headers), XHR uploads with
// progress, and authenticated downloads.

export const BASE = document.body.dataset.base || "";
const KEY_STORE = "sodm.apiKey";

// The key lives in this tab (sessionStorage); with "keep me signed in" also in localStorage,
// which new tabs read. Signing out (or a refused key) removes both.
export function getKey() { return sessionStorage.getItem(KEY_STORE) || localStorage.getItem(KEY_STORE); }
export function setKey(key, { remember = false } = {}) {
  sessionStorage.setItem(KEY_STORE, key);
  if (remember) localStorage.setItem(KEY_STORE, key); else localStorage.removeItem(KEY_STORE);
}
export function clearKey() { sessionStorage.removeItem(KEY_STORE); localStorage.removeItem(KEY_STORE); }

/** An RFC 9457 problem (or a network failure) as an Error with the problem's fields. */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

let onUnauthorized = () => {};
/** Called with the error when any request answers 401 (the key is wrong or revoked). */
export function setUnauthorizedHandler(fn) { onUnauthorized = fn; }

async function problemOf(resp) {
  const text = await resp.text();
  try {
    const body = JSON.parse(text);
    if (body && typeof body === "object") return body;
  } catch { /* not JSON */ }
  return { title: resp.statusText || `HTTP ${resp.status}`, status: resp.status, detail: text.slice(0, 300) };
}

/** ``fetch`` with the key; JSON in and out; throws ApiError for non-2xx answers. */
export async function api(path, { method = "GET", body, headers = {}, signal, key } = {}) {
  const h = { Accept: "application/json", ...headers };
  const k = key ?? getKey();
  if (k) h.Authorization = `Bearer ${k}`;
  let payload;
  if (body !== undefined) { h["Content-Type"] = "application/json"; payload = JSON.stringify(body); }
  // ``signal`` (the page was left) discards the answer rather than aborting the request:
  // short requests finish anyway, and an aborted request would read as a failed one.
  const resp = await fetch(BASE + path, { method, headers: h, body: payload });
  if (signal?.aborted) throw new DOMException("page left", "AbortError");
  if (!resp.ok) {
    const err = new ApiError(resp.status, await problemOf(resp));
    if (resp.status === 401 && key === undefined) onUnauthorized(err);
    throw err;
  }
  if (resp.status === 204) return null;
  const type = resp.headers.get("Content-Type") || "";
  const out = await (type.includes("json") ? resp.json() : resp.text());
  if (signal?.aborted) throw new DOMException("page left", "AbortError");
  return out;
}

/** Query string from an object, leaving out null/undefined/"" values. */
export function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") u.set(k, v);
  const s = u.toString();
  return s ? `?${s}` : "";
}

/**
 * Read ``GET path`` as server-sent events with the Bearer header. ``onEvent(name, data)`` gets
 * each event (``data`` parsed as JSON when it is). Resolves when the server ends the stream;
 * rejects on HTTP errors or network failure (AbortError when ``signal`` aborts).
 */
export async function streamEvents(path, onEvent, signal) {
  const resp = await fetch(BASE + path, {
    headers: { Accept: "text/event-stream", Authorization: `Bearer ${getKey()}` },
    signal, cache: "no-store",
  });
  if (!resp.ok) {
    const err = new ApiError(resp.status, await problemOf(resp));
    if (resp.status === 401) onUnauthorized(err);
    throw err;
  }
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value.replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (!line || line.startsWith(":")) continue;
        const i = line.indexOf(":");
        const field = i < 0 ? line : line.slice(0, i);
        const val = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
        if (field === "event") name = val;
        else if (field === "data") data.push(val);
      }
      if (!data.length) continue;
      const raw = data.join("\n");
      let parsed = raw;
      try { parsed = JSON.parse(raw); } catch { /* plain text data */ }
      onEvent(name, parsed);
    }
  }
}

/**
 * ``POST path`` a FormData with XMLHttpRequest (fetch has no upload progress).
 * ``onProgress(loaded, total)``; resolves with the JSON answer, rejects with ApiError.
 */
export function upload(path, form, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", BASE + path);
    xhr.setRequestHeader("Authorization", `Bearer ${getKey()}`);
    xhr.setRequestHeader("Accept", "application/json");
    xhr.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded, e.total); };
    xhr.onload = () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch { body = null; }
      if (xhr.status >= 200 && xhr.status < 300) { resolve(body); return; }
      const problem = body && typeof body === "object" ? body
        : { title: `HTTP ${xhr.status}`, status: xhr.status, detail: xhr.responseText.slice(0, 300) };
      const err = new ApiError(xhr.status, problem);
      if (xhr.status === 401) onUnauthorized(err);
      reject(err);
    };
    xhr.onerror = () => reject(new ApiError(0, { title: "Network error", detail: "the upload did not reach the server" }));
    xhr.send(form);
  });
}

/** Download ``GET path`` with the key and save it under the server's file name. */
export async function download(path, fallbackName) {
  const resp = await fetch(BASE + path, { headers: { Authorization: `Bearer ${getKey()}` } });
  if (!resp.ok) throw new ApiError(resp.status, await problemOf(resp));
  const cd = resp.headers.get("Content-Disposition") || "";
  const m = /filename\*?=(?:UTF-8'')?"?([^";]+)"?/i.exec(cd);
  const name = m ? decodeURIComponent(m[1]) : fallbackName;
  const url = URL.createObjectURL(await resp.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
  return name;
}

/** Every item of a cursor-paginated list (at most ``maxPages`` pages). */
export async function listAll(path, { limit = 200, maxPages = 10, signal } = {}) {
  const items = [];
  let cursor = null;
  for (let i = 0; i < maxPages; i++) {
    const sep = path.includes("?") ? "&" : "?";
    const page = await api(`${path}${sep}limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`, { signal });
    const rows = Array.isArray(page) ? page : page.items || [];
    items.push(...rows);
    cursor = Array.isArray(page) ? null : page.next_cursor;
    if (!cursor) break;
  }
  return items;
}
