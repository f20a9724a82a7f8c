"""The tree shows the architecture: no package folder of ``app``, ``worker`` or ``solver``
holds more than 16 modules (a bigger room is split by subdomain), and no two modules of a
package share a name,
except a route module and the schema module of the same HTTP resource
(``app/api/routes/jobs.py`` and ``app/schemas/jobs.py``): "models" in ``app`` means the
trained models' resource, never the ORM (``app/core/orm.py``) or a service."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "worker", "solver")
MAX_MODULES = 16
PAIRED = (Path("app/api/routes"), Path("app/schemas"))  # may share a resource's name


def crowded(root: Path, packages: tuple[str, ...] = PACKAGES,
            limit: int = MAX_MODULES) -> list[str]:
    """Folders with more than ``limit`` modules directly in them, with their count."""
    out = []
    for pkg in packages:
        for folder in sorted({p.parent for p in (root / pkg).rglob("*.py")}):
            n = len(list(folder.glob("*.py")))
            if n > limit:
                out.append(f"{folder.relative_to(root)}: {n} modules")
    return out


def shared_names(root: Path, package: str) -> list[str]:
    """Module names (``__init__`` aside) used by more than one module of ``package``, but a
    route module and its schema module."""
    by_name: dict[str, list[Path]] = defaultdict(list)
    for p in sorted((root / package).rglob("*.py")):
        if p.name != "__init__.py":
            by_name[p.stem].append(p.relative_to(root))
    out = []
    for name, paths in sorted(by_name.items()):
        if len(paths) < 2:
            continue
        if sorted(p.parent for p in paths) == sorted(PAIRED):
            continue
        out.append(f"{name}: " + ", ".join(map(str, paths)))
    return out


def test_no_folder_holds_more_than_16_modules() -> None:
    assert crowded(REPO) == []


def test_module_names_are_unique() -> None:
    for package in PACKAGES:
        assert shared_names(REPO, package) == [], package
    assert (REPO / "app/api/routes/models.py").is_file()  # the pairs the rule allows exist
    assert (REPO / "app/schemas/models.py").is_file()


def test_the_checks_see_a_crowded_folder_and_a_shared_name(tmp_path: Path) -> None:
    for i in range(17):
        (tmp_path / "app" / "services").mkdir(parents=True, exist_ok=True)
        (tmp_path / "app" / "services" / f"m{i}.py").write_text("")
    assert crowded(tmp_path) == ["app/services: 17 modules"]
    for folder in ("app/api/routes", "app/schemas", "app/core"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    for path in ("app/api/routes/jobs.py", "app/schemas/jobs.py", "app/api/routes/models.py",
                 "app/schemas/models.py", "app/core/models.py"):
        (tmp_path / path).write_text("")
    assert shared_names(tmp_path, "app") == [
        "models: app/api/routes/models.py, app/core/models.py, app/schemas/models.py"]
