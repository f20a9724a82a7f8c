"""Product code imports no private name (``_x``) from another module: what modules share is
public (``solver.core.training``, ``solver.sodm.levels``, ...). A private *module*
(``solver.core._numba_kernels``, the compiled kernels) is imported only inside its own
package: the service and the worker reach it through public modules (``solver.kernel_sums``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("solver", "app", "worker", "bench")


def _private_imports(path: Path, root: Path = ROOT) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        if node.module == "__future__" or node.module.split(".")[0] not in PACKAGES:
            continue
        for alias in node.names:
            if not alias.name.startswith("_"):
                continue
            if not (root / node.module.replace(".", "/") / f"{alias.name}.py").exists():
                found.append(f"{path.relative_to(root)}:{node.lineno}: "
                             f"from {node.module} import {alias.name}")
    return found


def test_no_private_name_is_imported_across_modules() -> None:
    found = [hit for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))
             for hit in _private_imports(path)]
    assert not found, "private names imported across modules:\n" + "\n".join(found)


def test_the_check_sees_a_private_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from solver.sodm import _rows, solve_partition\n"
                     "from solver import _numba_kernels\n")
    (tmp_path / "solver").mkdir()
    (tmp_path / "solver" / "_numba_kernels.py").write_text("")
    assert _private_imports(probe, tmp_path) == ["probe.py:1: from solver.sodm import _rows"]


def _foreign_private_modules(path: Path, root: Path = ROOT) -> list[str]:
    """Imports, in ``path``, of a private module (a dotted part ``_x``) of another package."""
    own = path.relative_to(root).parts[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names
                                       if (root / node.module.replace(".", "/")
                                           / f"{a.name}.py").exists()]
        else:
            continue
        for m in modules:
            parts = m.split(".")
            if parts[0] in PACKAGES and parts[0] != own and \
                    any(p.startswith("_") and not p.startswith("__") for p in parts[1:]):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {m}")
    return found


def test_no_private_module_is_imported_from_another_package() -> None:
    found = [hit for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))
             for hit in _foreign_private_modules(path)]
    assert not found, "private modules imported from other packages:\n" + "\n".join(found)


def test_the_check_sees_a_private_module(tmp_path: Path) -> None:
    (tmp_path / "solver").mkdir()
    (tmp_path / "solver" / "_numba_kernels.py").write_text("")
    (tmp_path / "app").mkdir()
    probe = tmp_path / "app" / "probe.py"
    probe.write_text("from solver import _numba_kernels, sodm\nimport solver._numba_kernels\n"
                     "from solver.kernel_sums import add_rbf_sums\n")
    assert _foreign_private_modules(probe, tmp_path) == [
        "app/probe.py:1: solver._numba_kernels", "app/probe.py:2: solver._numba_kernels"]
