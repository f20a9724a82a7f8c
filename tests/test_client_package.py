"""The Python client package (``sodm_client``) stands alone: it imports httpx and the
standard library only (none of the service's dependencies, nothing of ``app``, ``worker``
or ``solver``), and its types are the ones generated from the service's OpenAPI document
(``scripts/client_types.py``)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_client_imports_only_httpx_and_the_standard_library() -> None:
    allowed = {"httpx", "sodm_client", "__future__"} | set(sys.stdlib_module_names)
    for path in (REPO / "sodm_client").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"
    # and importing it loads none of the service's packages
    code = ("import sys, sodm_client; from sodm_client import types; "
            "heavy = {'fastapi', 'starlette', 'pydantic', 'sqlalchemy', 'numpy', 'app', "
            "'solver', 'worker', 'celery'}; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_client_types_are_generated_from_the_openapi_document() -> None:
    out = subprocess.run([sys.executable, "scripts/client_types.py", "--check"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
