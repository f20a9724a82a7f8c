// Hand-written SVG charts: line charts (convergence), the margin histogram with the theta band,
// the ROC curve and class-balance bars. Each returns an <svg> (or <figure>) element that scales
// with its container (viewBox) and carries a text title and description for screen readers.

import { fmtNum, h } from "./ui.js";

const NS = "http://www.w3.org/2000/svg";
const W = 640; // histogram
const H = 260;
const LW = 420; // line charts (three side by side on a laptop)
const LH = 250;
const PAD = { left: 64, right: 16, top: 24, bottom: 42 };

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

/** About ``n`` round tick values covering [lo, hi]. */
export function niceTicks(lo, hi, n = 5) {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [];
  if (lo === hi) { const d = Math.abs(lo) || 1; lo -= d / 2; hi += d / 2; }
  const raw = (hi - lo) / n;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((st) => raw <= st) || 10 * mag;
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

function frame(title, desc, width = W, height = H) {
  return s("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", class: "chart", preserveAspectRatio: "xMidYMid meet" },
    s("title", {}, title), s("desc", {}, desc));
}

function axes(svg, { x0, x1, y0, y1, xTicks, yTicks, sx, sy, xLabel, yLabel, yFmt = fmtNum, xFmt = fmtNum, width = W, height = H }) {
  const g = s("g", { class: "axes" });
  const bottom = height - PAD.bottom;
  g.append(s("line", { x1: PAD.left, y1: bottom, x2: width - PAD.right, y2: bottom, class: "axis" }));
  g.append(s("line", { x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: bottom, class: "axis" }));
  for (const t of yTicks) {
    if (t < y0 - 1e-12 || t > y1 + 1e-12) continue;
    const y = sy(t);
    g.append(s("line", { x1: PAD.left, y1: y, x2: width - PAD.right, y2: y, class: "grid" }));
    g.append(s("text", { x: PAD.left - 6, y: y + 4, "text-anchor": "end", class: "tick" }, yFmt(t)));
  }
  for (const t of xTicks) {
    if (t < x0 - 1e-12 || t > x1 + 1e-12) continue;
    const x = sx(t);
    g.append(s("line", { x1: x, y1: bottom, x2: x, y2: bottom + 5, class: "axis" }));
    g.append(s("text", { x, y: bottom + 18, "text-anchor": "middle", class: "tick" }, xFmt(t)));
  }
  if (xLabel) g.append(s("text", { x: (PAD.left + width - PAD.right) / 2, y: height - 6, "text-anchor": "middle", class: "label" }, xLabel));
  if (yLabel) g.append(s("text", { x: 14, y: (PAD.top + bottom) / 2, "text-anchor": "middle", class: "label", transform: `rotate(-90 14 ${(PAD.top + bottom) / 2})` }, yLabel));
  svg.append(g);
}

/**
 * A line chart of ``ys`` over ``xs`` (points with hover titles). ``log`` plots log10(y) for
 * positive data spanning more than two decades (KKT violations do).
 */
export function lineChart({ title, xs, ys, xLabel, yLabel, color = "series-1", log = "auto", yDomain, emptyText = "no data yet" }) {
  const W = LW;
  const H = LH;
  const pts = xs.map((x, i) => [x, ys[i]]).filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
  const svg = frame(title, `${yLabel} by ${xLabel}: ${pts.length} points`, W, H);
  svg.dataset.points = pts.length;
  if (!pts.length) {
    svg.append(s("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, emptyText));
    return svg;
  }
  const yv = pts.map((p) => p[1]);
  const pos = yv.every((v) => v > 0);
  const useLog = log === true || (log === "auto" && pos && Math.max(...yv) / Math.min(...yv) > 100);
  const ty = useLog ? (v) => Math.log10(v) : (v) => v;
  let [y0, y1] = yDomain || [Math.min(...yv.map(ty)), Math.max(...yv.map(ty))];
  if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
  if (!yDomain) { const pad = (y1 - y0) * 0.06; y0 -= pad; y1 += pad; } // points off the axes
  const yTicks = useLog ? niceTicks(Math.floor(y0), Math.ceil(y1), 5).filter(Number.isInteger) : niceTicks(y0, y1, 5);
  if (!yDomain) { y0 = Math.min(y0, ...yTicks); y1 = Math.max(y1, ...yTicks); }
  const xv = pts.map((p) => p[0]);
  let [x0, x1] = [Math.min(...xv), Math.max(...xv)];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  const sx = (x) => PAD.left + ((x - x0) / (x1 - x0)) * (W - PAD.left - PAD.right);
  const sy = (v) => H - PAD.bottom - ((v - y0) / (y1 - y0)) * (H - PAD.top - PAD.bottom);
  const xTicks = niceTicks(x0, x1, Math.min(8, xv.length)).filter((t) => Number.isInteger(t) || x1 - x0 > 10);
  axes(svg, { x0, x1, y0, y1, xTicks, yTicks, sx, sy, xLabel, yLabel: useLog ? `${yLabel} (log)` : yLabel,
    yFmt: useLog ? (t) => `1e${t}` : fmtNum, width: W, height: H });
  const d = pts.map(([x, y], i) => `${i ? "L" : "M"}${sx(x).toFixed(1)},${sy(ty(y)).toFixed(1)}`).join("");
  svg.append(s("path", { d, class: `line ${color}` }));
  for (const [x, y] of pts) {
    svg.append(s("circle", { cx: sx(x).toFixed(1), cy: sy(ty(y)).toFixed(1), r: 3.5, class: `dot ${color}` },
      s("title", {}, `${xLabel} ${fmtNum(x)}: ${fmtNum(y, 6)}`)));
  }
  return svg;
}

/**
 * Histogram of the margins y*f(x) (``edges``/``counts``) with the band [lower, upper] shaded
 * and the mean marked.
 */
export function marginHistogram({ edges, counts, band, mean }) {
  const n = counts.reduce((a, b) => a + b, 0);
  const svg = frame("Margin distribution y·f(x)",
    `Histogram of ${n} margins in ${counts.length} bins; band [${fmtNum(band?.lower)}, ${fmtNum(band?.upper)}] shaded; mean ${fmtNum(mean)}`);
  svg.classList.add("margin-histogram");
  svg.dataset.bins = counts.length;
  let x0 = edges[0];
  let x1 = edges[edges.length - 1];
  if (band) { x0 = Math.min(x0, band.lower - 0.05); x1 = Math.max(x1, band.upper + 0.05); }
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  const ymax = Math.max(1, ...counts);
  const yTicks = niceTicks(0, ymax, 4);
  const y1 = Math.max(ymax, ...yTicks);
  const sx = (x) => PAD.left + ((x - x0) / (x1 - x0)) * (W - PAD.left - PAD.right);
  const sy = (v) => H - PAD.bottom - (v / y1) * (H - PAD.top - PAD.bottom);
  if (band) {
    svg.append(s("rect", { x: sx(band.lower), y: PAD.top, width: Math.max(1, sx(band.upper) - sx(band.lower)),
      height: H - PAD.top - PAD.bottom, class: "band" }, s("title", {}, `band [1-θ, 1+θ] = [${fmtNum(band.lower)}, ${fmtNum(band.upper)}]`)));
  }
  axes(svg, { x0, x1, y0: 0, y1, xTicks: niceTicks(x0, x1, 8), yTicks, sx, sy, xLabel: "margin y·f(x)", yLabel: "count" });
  const bars = s("g", { class: "bars" });
  counts.forEach((c, i) => {
    const a = sx(edges[i]);
    const b = sx(edges[i + 1]);
    bars.append(s("rect", { x: a.toFixed(1), y: sy(c).toFixed(1), width: Math.max(0.5, b - a - 0.6).toFixed(1),
      height: (H - PAD.bottom - sy(c)).toFixed(1), class: "hist-bar" },
      s("title", {}, `[${fmtNum(edges[i])}, ${fmtNum(edges[i + 1])}): ${c}`)));
  });
  svg.append(bars);
  if (band) {
    for (const [v, name] of [[band.lower, "1−θ"], [band.upper, "1+θ"]]) {
      svg.append(s("line", { x1: sx(v), x2: sx(v), y1: PAD.top, y2: H - PAD.bottom, class: "band-edge" }));
      svg.append(s("text", { x: sx(v), y: PAD.top - 7, "text-anchor": "middle", class: "band-label" }, name));
    }
  }
  if (Number.isFinite(mean)) {
    svg.append(s("line", { x1: sx(mean), x2: sx(mean), y1: PAD.top, y2: H - PAD.bottom, class: "mean-line" },
      s("title", {}, `mean ${fmtNum(mean)}`)));
  }
  return svg;
}

/** ROC curve from ``fpr``/``tpr`` arrays with the chance diagonal. */
export function rocCurve({ fpr, tpr, auc }) {
  const size = 320;
  const svg = frame("ROC curve", `ROC curve, AUC ${fmtNum(auc)}`, size + 30, size);
  const pad = { l: 48, r: 12, t: 10, b: 40 };
  const sx = (x) => pad.l + x * (size + 30 - pad.l - pad.r);
  const sy = (y) => size - pad.b - y * (size - pad.t - pad.b);
  const g = s("g", { class: "axes" });
  for (const t of [0, 0.25, 0.5, 0.75, 1]) {
    g.append(s("line", { x1: sx(0), x2: sx(1), y1: sy(t), y2: sy(t), class: "grid" }));
    g.append(s("text", { x: sx(0) - 6, y: sy(t) + 4, "text-anchor": "end", class: "tick" }, t));
    g.append(s("text", { x: sx(t), y: sy(0) + 16, "text-anchor": "middle", class: "tick" }, t));
  }
  g.append(s("text", { x: (sx(0) + sx(1)) / 2, y: size - 6, "text-anchor": "middle", class: "label" }, "false positive rate"));
  g.append(s("text", { x: 12, y: sy(0.5), "text-anchor": "middle", class: "label", transform: `rotate(-90 12 ${sy(0.5)})` }, "true positive rate"));
  svg.append(g);
  svg.append(s("line", { x1: sx(0), y1: sy(0), x2: sx(1), y2: sy(1), class: "chance" }));
  const d = fpr.map((x, i) => `${i ? "L" : "M"}${sx(x).toFixed(1)},${sy(tpr[i]).toFixed(1)}`).join("");
  svg.append(s("path", { d, class: "line series-1" }));
  return svg;
}

/** Horizontal bars of class counts (dataset summary). */
export function classBars(classes) {
  const entries = Object.entries(classes || {});
  const total = entries.reduce((a, [, c]) => a + c, 0) || 1;
  return h("ul.class-bars", { "aria-label": "Class balance" }, entries.map(([label, count]) => {
    const fill = h("span.cb-fill");
    fill.style.width = `${(100 * count) / total}%`;
    return h("li", {}, h("span.cb-label", {}, label), h("span.cb-track", {}, fill),
      h("span.cb-count", {}, `${count.toLocaleString("en-US")} (${((100 * count) / total).toFixed(1)}%)`));
  }));
}

/**
 * Live served margins y_hat·f(x) against the training (held-out) ones: both histograms on
 * the monitoring grid as shares (step lines), the band [1-θ, 1+θ] shaded. ``edges`` are the
 * inner edges; ``reference``/``live`` have one count more below and one above them.
 */
export function marginOverlay({ edges, reference, live, band }) {
  const share = (c) => { const n = c.reduce((a, b) => a + b, 0); return c.map((v) => (n ? v / n : 0)); };
  const ref = reference ? share(reference) : null;
  const cur = share(live);
  const nLive = live.reduce((a, b) => a + b, 0);
  const svg = frame("Served margins, live against training",
    `Shares of ${nLive} live margins and of the held-out margins in bins of ${fmtNum(edges[1] - edges[0])}; band shaded`);
  svg.classList.add("margin-overlay");
  svg.dataset.live = nLive;
  // inner bin i of the grid is count i + 1; keep the bins where either has mass
  const used = [];
  for (let i = 0; i < edges.length - 1; i += 1) if (cur[i + 1] > 0 || (ref && ref[i + 1] > 0)) used.push(i);
  let lo = used.length ? used[0] : 0;
  let hi = used.length ? used[used.length - 1] + 1 : edges.length - 1;
  lo = Math.max(0, lo - 2); hi = Math.min(edges.length - 1, hi + 2);
  let x0 = edges[lo];
  let x1 = edges[hi];
  if (band) { x0 = Math.min(x0, band.lower - 0.1); x1 = Math.max(x1, band.upper + 0.1); }
  const inner = (arr) => arr.slice(1, -1);
  const ymax = Math.max(1e-6, ...inner(cur), ...(ref ? inner(ref) : []));
  const yTicks = niceTicks(0, ymax, 4);
  const y1 = Math.max(ymax, ...yTicks);
  const sx = (x) => PAD.left + ((Math.min(Math.max(x, x0), x1) - x0) / (x1 - x0)) * (W - PAD.left - PAD.right);
  const sy = (v) => H - PAD.bottom - (v / y1) * (H - PAD.top - PAD.bottom);
  if (band) {
    svg.append(s("rect", { x: sx(band.lower), y: PAD.top, width: Math.max(1, sx(band.upper) - sx(band.lower)),
      height: H - PAD.top - PAD.bottom, class: "band" }, s("title", {}, `band [${fmtNum(band.lower)}, ${fmtNum(band.upper)}]`)));
  }
  axes(svg, { x0, x1, y0: 0, y1, xTicks: niceTicks(x0, x1, 8), yTicks, sx, sy, xLabel: "served margin ŷ·f(x)", yLabel: "share",
    yFmt: (t) => `${Math.round(t * 1000) / 10}%` });
  const step = (shares, cls, name) => {
    let d = "";
    for (let i = lo; i < hi; i += 1) {
      const y = sy(shares[i + 1]).toFixed(1);
      d += `${d ? "L" : "M"}${sx(edges[i]).toFixed(1)},${y}L${sx(edges[i + 1]).toFixed(1)},${y}`;
    }
    svg.append(s("path", { d, class: `line ${cls}`, "data-series": name }, s("title", {}, name)));
  };
  if (ref) step(ref, "series-2", "training (held-out)");
  step(cur, "series-1", "live");
  const legend = s("g", { class: "legend" });
  [["live", "series-1"], ...(ref ? [["training (held-out)", "series-2"]] : [])].forEach(([name, cls], i) => {
    const x = PAD.left + 8 + i * 110; // one row above the plot area
    const y = PAD.top - 12;
    legend.append(s("line", { x1: x, x2: x + 22, y1: y, y2: y, class: `line ${cls}` }));
    legend.append(s("text", { x: x + 28, y: y + 4, class: "tick" }, name));
  });
  svg.append(legend);
  return svg;
}
