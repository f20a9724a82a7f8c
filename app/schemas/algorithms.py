"""Response body of ``GET /algorithms`` (built from the specs of
``app.services.job_queue.algorithm_specs``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class ParamLimit(BaseModel):
    value: float = Field(description="the largest value this server accepts")
    setting: str = Field(description="the environment variable that sets it",
                         examples=["SODM_LIMIT_N_JOBS"])


class ParamOut(BaseModel):
    """One parameter of an algorithm: its type, default, bounds and meaning."""

    name: str = Field(examples=["lam"])
    type: Literal["number", "integer", "boolean", "choice"]
    default: Any = Field(description="the value used when the request leaves it out "
                         "(null: the solver chooses)")
    description: str
    minimum: float | None = Field(description="inclusive lower bound")
    exclusive_minimum: float | None
    maximum: float | None = Field(description="inclusive upper bound (see also limit)")
    exclusive_maximum: float | None
    choices: list[str] = Field(description="the values of a choice")
    words: list[str] = Field(description="strings accepted besides a number, e.g. \"scale\"")
    nullable: bool = Field(description="null is accepted: the solver chooses")
    limit: ParamLimit | None = Field(description="this server's maximum for a parameter that "
                                     "costs memory or time")
    kernels: list[str] = Field(description="the kernels it applies to (empty: all)")
    advanced: bool = Field(description="rarely changed (folded away in the dashboard)")
    json_schema: dict[str, Any] = Field(alias="schema", description="the JSON schema of the "
                                        "accepted values")


class AlgorithmOut(BaseModel):
    name: str = Field(examples=["sodm"])
    title: str
    description: str
    backends: list[str]
    params: list[ParamOut]


class AlgorithmList(BaseModel):
    items: list[AlgorithmOut]
