// How a model was fitted, from its ``fit_info``: the automatic hyperparameter search (chosen
// lam / gamma / theta, CPU seconds against the budget, the CV table) and the calibration
// of its probabilities. Shared by the model and job pages.

import { dl, fmtNum, fmtPct, h, table } from "./ui.js";

// a tie-break: halving rungs by number (the theta stage as 0), the refinement and its screen last
const STAGE_ORDER = (s) => (String(s).startsWith("refine") ? 1e6 : Number(String(s).split(" ")[1]) || 0);

/** The "auto" search of ``fitInfo`` as a card body, or null when nothing was auto. */
export function autoSearch(fitInfo) {
  const a = fitInfo?.auto;
  if (!a?.chosen) return null;
  const chosen = a.chosen;
  const autos = new Set(a.auto || []);
  const rows = [...(a.cv_table || [])];
  const best = rows.reduce((b, r) => (r.rows === a.rows && !r.raced && (!b || r.mean_accuracy > b.mean_accuracy) ? r : b), null);
  const isChosen = (r) => r.rows === a.rows && r.lam === chosen.lam && r.gamma === chosen.gamma && r.theta === chosen.theta;
  rows.sort((x, y) => (y.rows - x.rows) || (y.mean_accuracy - x.mean_accuracy) || (STAGE_ORDER(x.stage) - STAGE_ORDER(y.stage)));
  const value = (k, v) => h(autos.has(k) ? "strong" : "span", {}, fmtNum(v, 4), autos.has(k) ? " (auto)" : "");
  const budgetOk = a.within_budget !== false;
  const cols = [
    { label: "Stage", cell: (r) => r.stage },
    { label: "Rows", className: "num", cell: (r) => fmtNum(r.rows) },
    { label: "lam", className: "num", cell: (r) => fmtNum(r.lam, 3) },
    { label: "gamma", className: "num", cell: (r) => fmtNum(r.gamma, 3) },
    { label: "theta", className: "num", cell: (r) => fmtNum(r.theta, 3) },
    // a candidate raced out of its rung (``raced``) was scored on its first folds only
    { label: "CV accuracy", className: "num", cell: (r) => `${fmtNum(r.mean_accuracy, 4)} ± ${fmtNum(r.std_accuracy, 2)}`
      + (r.raced ? ` (stopped after ${(r.fold_accuracy || []).length} of ${a.folds} folds)` : "") },
    { label: "CPU s", className: "num", cell: (r) => fmtNum(r.cpu_seconds, 3) },
  ];
  const shown = rows.slice(0, 12);
  return h("div.auto-search", { dataset: { auto: [...autos].join(",") } },
    dl([
      ["Chosen", h("span#auto-chosen", {}, "lam ", value("lam", chosen.lam), " · gamma ", value("gamma", chosen.gamma),
        ` (${fmtNum(chosen.gamma / a.gamma_scale, 3)} × scale)`, " · theta ", value("theta", chosen.theta))],
      ["Search", `${a.method}`],
      ["CV rows", h("span#auto-rows", {},
        `${fmtNum(a.rows)} (${a.folds}-fold), ${fmtNum(rows.length)} evaluations; ${a.stop_reason}`,
        a.row_bound ? `; the budget reaches ${fmtNum(a.row_bound)} rows at most (all the search reads)` : "")],
      ["CPU seconds", h("span#auto-cpu", { dataset: { withinBudget: String(budgetOk) } },
        `search ${fmtNum(a.cpu_seconds, 3)} s · final fit ${fmtNum(a.final_fit_cpu_seconds, 3)} s · allowed ${fmtNum(a.budget_allowed_cpu_seconds, 3)} s (${a.budget_rule})`,
        budgetOk ? "" : " — over budget")],
      best ? ["Best CV accuracy", `${fmtNum(best.mean_accuracy, 4)} on ${fmtNum(best.rows)} rows`] : null,
    ]),
    h("h3", {}, "Cross-validation table"),
    h("div#auto-table", {}, table(cols, shown, { caption: "CV table of the automatic search", rowAttrs: (r) => (isChosen(r) ? { class: "chosen" } : {}) })),
    rows.length > shown.length
      ? h("details", {}, h("summary", {}, `All ${fmtNum(rows.length)} evaluations`), table(cols, rows, { caption: "Every CV evaluation" }))
      : null);
}

/** ECE, Brier and the reliability bins of ``metrics.calibration``, or null. */
export function calibration(cal) {
  if (!cal) return null;
  const cols = [
    { label: "Confidence bin", cell: (b) => `${fmtPct(b.lower)}–${fmtPct(b.upper)}` },
    { label: "Rows", className: "num", cell: (b) => fmtNum(b.n) },
    { label: "Mean confidence", className: "num", cell: (b) => fmtNum(b.confidence, 3) },
    { label: "Accuracy", className: "num", cell: (b) => fmtNum(b.accuracy, 3) },
  ];
  return h("div.calibration", {},
    dl([
      ["Method", "Platt scaling on held-out decision values"],
      ["Expected calibration error", h("strong#cal-ece", {}, fmtNum(cal.ece, 4))],
      ["Brier score", h("strong#cal-brier", {}, fmtNum(cal.brier, 4))],
      ["Rows", fmtNum(cal.n)],
    ]),
    h("details", {}, h("summary", {}, "Reliability bins"), table(cols, cal.reliability || [], { caption: "Reliability bins" })));
}
