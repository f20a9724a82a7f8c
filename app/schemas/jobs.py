"""Request and response bodies of ``POST /train`` and the ``/jobs`` resources."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, RootModel, create_model, model_validator

from app.core.orm import JobState
from app.schemas.common import ID_PATTERN, StoredBody
from app.services.job_queue import algorithm_specs as algorithms

DEFAULT_ALGORITHM = "sodm"

# a class weight: positive and finite
ClassWeightValue = Annotated[float, Field(gt=0, allow_inf_nan=False)]

TRAIN_EXAMPLES: dict[str, dict[str, Any]] = {
    "auto": {"summary": "Defaults: lam, gamma and theta chosen by cross-validation (\"auto\")",
             "value": {"dataset_id": "3f2c9a1e-8d4b-4c1a-9e7f-2b6d5a4c3e21", "name": "churn"}},
    "probabilities": {"summary": "Platt-calibrated probabilities; lam fixed, gamma and theta "
                                 "auto",
                      "value": {"dataset_id": "3f2c9a1e-8d4b-4c1a-9e7f-2b6d5a4c3e21",
                                "name": "churn", "test_fraction": 0.2,
                                "params": {"kernel": "rbf", "lam": 10000,
                                           "probability": True}}},
    "sodm-rbf": {"summary": "SODM with an RBF kernel (defaults elsewhere)",
                 "value": {"dataset_id": "3f2c9a1e-8d4b-4c1a-9e7f-2b6d5a4c3e21",
                           "algorithm": "sodm", "params": {"kernel": "rbf", "lam": 1000},
                           "test_fraction": 0.2, "seed": 0, "name": "churn"}},
    "odm-linear-search": {"summary": "Exact linear ODM with a grid search over lam",
                          "value": {"dataset_id": "3f2c9a1e-8d4b-4c1a-9e7f-2b6d5a4c3e21",
                                    "algorithm": "odm", "params": {"kernel": "linear"},
                                    "search": {"grid": {"lam": [10, 100, 1000]}, "folds": 3}}},
    "sodm-spark": {"summary": "SODM on the Spark backend",
                   "value": {"dataset_id": "3f2c9a1e-8d4b-4c1a-9e7f-2b6d5a4c3e21",
                             "algorithm": "sodm", "backend": "spark",
                             "params": {"kernel": "rbf", "p": 4, "levels": 2}}},
}


class SearchSpec(StoredBody):
    """Grid search with stratified k-fold cross-validation on the training part: every
    combination of the listed parameter values (at most ``SODM_LIMIT_GRID_POINTS``), each
    value checked like the same key of ``params``."""

    model_config = ConfigDict(extra="forbid")

    grid: dict[str, list[Any]] = Field(min_length=1, examples=[{"lam": [10, 100, 1000],
                                                                "gamma": ["scale", 0.5]}])
    folds: int = Field(default=3, ge=2, description="at most SODM_LIMIT_SEARCH_FOLDS (20)")


class TrainRequestBase(StoredBody):
    """The fields every ``POST /train`` body has; ``algorithm`` selects the variant and with
    it the typed ``params``. Unknown keys are rejected (422)."""

    model_config = ConfigDict(extra="forbid")

    dataset_id: str = Field(min_length=1, max_length=64, pattern=ID_PATTERN)
    backend: Literal["local", "spark"] = Field(
        default="local", description="spark (algorithm sodm only) needs SODM_SPARK_REMOTE or "
        "SODM_SPARK_MASTER")
    test_dataset_id: str | None = Field(default=None, max_length=64, pattern=ID_PATTERN,
                                        description="held-out dataset for the metrics")
    test_fraction: float | None = Field(
        default=None, gt=0.0, lt=1.0, description="stratified held-out fraction (by seed) "
        "when no test_dataset_id; 0.2 when neither is given")
    seed: int = Field(default=0, ge=0, le=2**31 - 1,
                      description="split, CV folds and solver randomness (the estimator's "
                      "random_state)")
    search: SearchSpec | None = Field(
        default=None, description="grid search by k-fold CV accuracy on the training part; "
        "the best point is refitted on the whole training part (either backend: the same "
        "folds and choice)")
    name: str | None = Field(default=None, min_length=1, max_length=200,
                             pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                             description="model name (versions increase per name); default "
                             "<dataset name>-<algorithm>")
    class_weight: Literal["balanced"] | dict[str, ClassWeightValue] | None = Field(
        default=None, examples=["balanced", {"1": 20.0}],
        description="weight of each class's rows in the loss: \"balanced\" (n_rows / "
        "(n_classes * rows of the class), as scikit-learn) or {label: weight > 0} for "
        "labels of the dataset as GET /datasets/{id} lists them (others weigh 1); the "
        "model's CV scores (search, \"auto\") become balanced accuracy")
    weight_column: str | None = Field(
        default=None, min_length=1, max_length=200,
        description="a column of a CSV or Parquet dataset holding each row's weight "
        "(finite, >= 0; 0 leaves the row out): it is taken out of the features, so the model "
        "has one feature fewer and predictions are sent without it; a test_dataset_id needs "
        "the same column")

    # set by each variant
    algorithm: str
    params: BaseModel

    def param_values(self) -> dict[str, Any]:
        """The parameters the request set (the rest take the estimator's defaults)."""
        return self.params.model_dump(mode="json", exclude_unset=True)

    def stored(self) -> dict[str, Any]:
        """The request as the job records it (``params`` as sent, not filled in; the weight
        fields only when given, so older requests keep their hash)."""
        unset = {k for k in ("class_weight", "weight_column") if getattr(self, k) is None}
        return {**self.model_dump(mode="json", exclude={"params", *unset}),
                "params": self.param_values()}


def _variant(name: str) -> type[TrainRequestBase]:
    alg = algorithms.ALGORITHMS[name]
    params = algorithms.params_model(name)
    return create_model(
        f"{params.__name__.removesuffix('Params')}TrainRequest", __base__=TrainRequestBase,
        __doc__=f"{alg.title}: {alg.description}",
        algorithm=(Literal[name], Field(description="the algorithm (default sodm when left "
                                                    "out)")),  # type: ignore[valid-type]
        params=(params, Field(default_factory=params, description="the parameters of "
                              f"{alg.title}; each one left out takes its default")))


TRAIN_VARIANTS: dict[str, type[TrainRequestBase]] = {
    name: _variant(name) for name in algorithms.ALGORITHM_NAMES}


class TrainRequest(RootModel[Annotated[Union[tuple(TRAIN_VARIANTS.values())],  # noqa: UP007
                                       Field(discriminator="algorithm")]]):
    """Body of ``POST /train``: one variant per ``algorithm`` (a discriminated union; a body
    without ``algorithm`` is an ``sodm`` request)."""

    @model_validator(mode="before")
    @classmethod
    def _default_algorithm(cls, value: Any) -> Any:
        if isinstance(value, dict) and "algorithm" not in value:
            return {**value, "algorithm": DEFAULT_ALGORITHM}
        return value


class SparkProgress(BaseModel):
    """Where a Spark job's work runs and how far its current Spark stage is (the worker
    samples it while the job trains; the last sample stays after the job ends)."""

    mode: Literal["classic", "connect"] = Field(
        description="classic: a driver in the worker (SODM_SPARK_MASTER); connect: a Spark "
        "Connect server (SODM_SPARK_REMOTE)")
    application_id: str | None = Field(
        default=None, description="the Spark application id (classic), as the master's UI "
        "shows it")
    session_id: str | None = Field(default=None,
                                   description="the Connect server session of the attempt")
    stage_id: int | None = Field(default=None, description="the running Spark stage, if any")
    tasks_done: int = Field(default=0, description="completed tasks of that stage")
    tasks_total: int = Field(default=0, description="tasks of that stage")
    stages_done: int = Field(default=0, description="Spark stages this job has completed")


class Progress(BaseModel):
    fraction: float
    message: str
    spark: SparkProgress | None = Field(
        default=None, description="backend spark: the Spark application or session and "
        "the current stage's progress")


class JobOut(BaseModel):
    """A training job as the API shows it."""

    kind: Literal["train"] = Field(default="train", description="a training job (batch "
                                   "prediction jobs are ``predict``)")
    id: str
    state: JobState
    dataset_id: str
    test_dataset_id: str | None
    algorithm: str
    backend: str
    params: dict[str, Any]
    request: dict[str, Any]
    name: str | None
    progress: Progress
    history: list[dict[str, Any]]
    attempt: int
    max_attempts: int
    model_id: str | None
    error: dict[str, Any] | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    request_id: str | None = Field(
        default=None, description="X-Request-ID of the POST /train that created the job; the "
        "API's and the worker's log lines of the job carry it")
    waiting: str | None = Field(
        default=None, description="why a QUEUED job is not running yet (no live worker)")
    links: dict[str, str]


class JobList(BaseModel):
    items: list[JobOut]
    next_cursor: str | None
