"""Shapes shared by every resource: the RFC 9457 problem body (for the OpenAPI document)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field


class Problem(BaseModel):
    """``application/problem+json`` (RFC 9457); extension members such as ``line``,
    ``field``/``column``, ``value`` or ``errors`` appear next to the standard ones."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(examples=["https://sodm.dev/problems/invalid-libsvm"])
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None


def problem_responses(*codes: int) -> dict[int | str, dict]:
    """OpenAPI ``responses`` entries documenting problem bodies for the given codes."""
    schema = {"schema": {"$ref": "#/components/schemas/Problem"}}
    return {code: {"model": Problem, "content": {"application/problem+json": schema}}
            for code in codes}


# Resource ids are uuid4 strings; anything else (NUL bytes, separators, other scripts) is a
# 422 naming the field instead of a database error.
ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
IdPath = Annotated[str, Path(pattern=ID_PATTERN, description="a resource id")]
