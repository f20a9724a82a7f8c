"""Opaque keyset-pagination cursors over ``(created_at, id)`` in descending order."""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime

from sqlalchemy import Select, and_, or_

from app.core.problems import ProblemError
from app.schemas.common import ID_PATTERN


def as_utc(ts: datetime | None) -> datetime | None:
    """SQLite returns naive datetimes (stored as UTC); make every timestamp aware."""
    if ts is None:
        return None
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def encode_cursor(created_at: datetime, row_id: str) -> str:
    raw = json.dumps([as_utc(created_at).isoformat(), row_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        ts, row_id = json.loads(raw)
        if not re.fullmatch(ID_PATTERN, str(row_id)):
            raise ValueError("not an id")
        return datetime.fromisoformat(ts), str(row_id)
    except Exception as exc:  # noqa: BLE001 - any garbage is the client's error
        raise ProblemError(422, "Invalid cursor", detail="cursor is not one this API issued",
                           errors=[{"field": "cursor", "message": "malformed"}]) from exc


def page(stmt: Select, table, cursor: str | None, limit: int) -> Select:
    """Apply ordering, the cursor position and ``limit + 1`` (to detect a next page)."""
    if cursor:
        ts, row_id = decode_cursor(cursor)
        stmt = stmt.where(or_(table.created_at < ts,
                              and_(table.created_at == ts, table.id < row_id)))
    return stmt.order_by(table.created_at.desc(), table.id.desc()).limit(limit + 1)


def split_page(rows: list, limit: int) -> tuple[list, str | None]:
    """The first ``limit`` rows and the cursor of the next page (None when last)."""
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    return rows, encode_cursor(rows[-1].created_at, rows[-1].id)
