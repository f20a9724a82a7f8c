"""Shapes shared by every resource: the RFC 9457 problem body (for the OpenAPI document)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field, field_validator


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


# NUL (Postgres refuses it in text and JSONB) and lone UTF-16 surrogates (JSON lets "\ud800"
# through; it is not UTF-8, so no database or log can store it)
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_MAX_WALK_DEPTH = 32


def unstorable(value: Any, depth: int = 0) -> str | None:
    """What in ``value`` (a string, or any string, key or model field inside it) cannot be
    stored as text: ``"NUL (\\x00)"`` or ``"a lone surrogate (\\ud800)"``; None if nothing."""
    if isinstance(value, str):
        m = _UNSTORABLE.search(value)
        if m is None:
            return None
        ch = m.group()
        return "NUL (\\x00)" if ch == "\x00" else f"a lone surrogate (\\u{ord(ch):04x})"
    if depth >= _MAX_WALK_DEPTH:
        return None
    if isinstance(value, BaseModel):
        value = value.__dict__
    if isinstance(value, dict):
        items: Any = (x for kv in value.items() for x in kv)
    elif isinstance(value, list | tuple | set | frozenset):
        items = value
    else:
        return None
    for v in items:
        why = unstorable(v, depth + 1)
        if why is not None:
            return why
    return None


class StoredBody(BaseModel):
    """A request body whose text is stored (names, descriptions, parameters): a string with
    NUL or a lone surrogate anywhere in a field is a 422 naming that field, not a database
    error."""

    @field_validator("*", mode="after")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        why = unstorable(value)
        if why is not None:
            raise ValueError(f"text must not contain {why}")
        return value
