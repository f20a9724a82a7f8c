"""The training side of margin monitoring for models trained before it existed: their
reference (``models.margin_reference``) computed once, on first ask, from a seeded sample of
their dataset's rows, and stored. (A model trained since has the reference of its held-out
rows, written by the worker.) The sample includes training rows, whose margins are a little
tighter than unseen rows': the reference says so in ``source``."""

from __future__ import annotations

import logging

import numpy as np
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.core.orm import Dataset, Model
from app.services.filestore import storage
from app.services.inference import monitoring, predictor

log = logging.getLogger(__name__)

SAMPLE_ROWS = 10_000
SAMPLE_SEED = 20_260_401
SOURCE = "dataset-sample"


def ensure(session: Session, m: Model) -> None:
    """Compute and store ``m``'s reference when it has none and its dataset's files are
    still there (otherwise the report says there is no reference)."""
    if m.margin_reference:
        return
    ds = session.get(Dataset, m.dataset_id)
    if ds is None or ds.deleted_at is not None:
        return
    directory = storage.dataset_dir(ds.id)
    if not (directory / storage.META_FILE).exists():
        return
    n = int(storage.read_meta(directory)["n_rows"])
    rows = np.arange(n)
    if n > SAMPLE_ROWS:
        rows = np.sort(np.random.default_rng(SAMPLE_SEED).choice(n, SAMPLE_ROWS,
                                                                 replace=False))
    X, _ = storage.load_rows(directory, rows)
    sm = predictor.load(m)
    if X.shape[1] != sm.n_features:
        log.info("model %s: dataset width %d != model width %d; no reference", m.id,
                 X.shape[1], sm.n_features)
        return
    ref = monitoring.reference_of(sm.decision(X), monitoring.model_theta(sm.est), SOURCE)
    session.execute(update(Model).where(Model.id == m.id).values(margin_reference=ref))
    session.commit()
    m.margin_reference = ref
