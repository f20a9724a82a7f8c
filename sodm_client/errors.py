"""The one exception the client raises for an answer that is not a success."""

from __future__ import annotations

from typing import Any


class SodmError(Exception):
    """A failed request (or job): ``status`` and the RFC 9457 ``problem`` the service sent
    (``type``, ``title``, ``detail`` and its extension members such as ``errors``,
    ``field``, ``limit``). An answer without a problem body gets one made from its status
    and text; a job that failed carries the job's own problem."""

    def __init__(self, problem: dict[str, Any], status: int | None = None) -> None:
        self.problem = dict(problem)
        self.status = int(status if status is not None else problem.get("status") or 0)
        super().__init__(f"{self.status} {self.title}"
                         + (f": {self.detail}" if self.detail else ""))

    @property
    def type(self) -> str:
        return str(self.problem.get("type", "about:blank"))

    @property
    def title(self) -> str:
        return str(self.problem.get("title", "Error"))

    @property
    def detail(self) -> str | None:
        detail = self.problem.get("detail")
        return None if detail is None else str(detail)
