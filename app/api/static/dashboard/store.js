// Small shared caches: dataset names by id (the job and model lists show names, not ids).

import { listAll } from "./api.js";

let names = null;
let fetchedAt = 0;
let missing = new Set(); // ids asked for but absent (deleted datasets): no refetch until TTL
const TTL_MS = 30_000;

/** Map of dataset id -> name for this tenant (cached for 30 s; refreshed on a miss). */
export async function datasetNames({ ids = [], signal } = {}) {
  const stale = !names || Date.now() - fetchedAt > TTL_MS || ids.some((id) => !names.has(id) && !missing.has(id));
  if (stale) {
    const items = await listAll("/datasets", { signal });
    names = new Map(items.map((d) => [d.id, d.name]));
    fetchedAt = Date.now();
    missing = new Set(ids.filter((id) => !names.has(id)));
  }
  return names;
}

export function forgetDatasets() { names = null; }
