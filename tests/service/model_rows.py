"""A model version registered as the worker commits one (job row, model row with its
held-out margin reference, its bytes), for tests of what the API does with models without running
a worker."""

from __future__ import annotations

from typing import Any

import numpy as np


def dataset_row(tenant_id: str, n_rows: int, n_features: int, name: str = "rows") -> str:
    """A ready dataset row with no files (what a model row names); its id."""
    from app.core.db import session_scope
    from app.core.orm import Dataset

    with session_scope() as s:
        ds = Dataset(tenant_id=tenant_id, name=name, format="libsvm", n_rows=n_rows,
                     n_features=n_features, classes={"-1": 1, "1": 1}, storage_path="none",
                     size_bytes=0)
        s.add(ds)
        s.flush()
        return ds.id


def register_model(tenant_id: str, dataset_id: str, est: Any, name: str,
                   X_held_out: np.ndarray | None = None) -> str:
    """Insert a SUCCEEDED job and the model version of the fitted ``est``; its margin
    reference is computed on ``X_held_out`` as the worker's evaluation does. The model id."""
    from sqlalchemy import func, select

    from app.core.db import session_scope
    from app.core.orm import Job, JobState, Model, new_id, utcnow
    from app.services.inference.monitoring import model_theta, reference_of
    from app.services.model_registry import model_store

    model_id = new_id()
    stored = model_store.dump(est)
    reference = None
    if X_held_out is not None:
        reference = reference_of(est.decision_function(X_held_out), model_theta(est),
                                 "held-out")
    with session_scope() as s:
        job = Job(tenant_id=tenant_id, dataset_id=dataset_id, algorithm="odm",
                  state=JobState.SUCCEEDED, params={}, request={}, model_name=name,
                  finished_at=utcnow(), announced_at=utcnow())
        s.add(job)
        s.flush()
        top = s.scalar(select(func.max(Model.version)).where(Model.tenant_id == tenant_id,
                                                             Model.name == name))
        s.add(Model(id=model_id, tenant_id=tenant_id, job_id=job.id, dataset_id=dataset_id,
                    name=name, version=(top or 0) + 1, algorithm="odm",
                    params={"theta": model_theta(est)}, n_features=int(est.n_features_in_),
                    classes=[int(c) for c in est.classes_], margin_reference=reference,
                    file_sha256=stored.sha256, file_bytes=stored.size))
        s.flush()
        s.add(model_store.blob(model_id, stored))
        job.model_id = model_id
    return model_id
