"""The import graph of the product code (``app``, ``worker``, ``solver``, ``migrations``,
``bench``) has no circle, and the layers hold: ``app`` never imports ``worker`` or pyspark,
``solver`` imports nothing of ``app`` or ``worker`` (pyspark only under ``solver/spark``), the
shared domain (``app.core``, ``app.schemas``, ``app.services``) never imports the HTTP layer
(``app.api``, ``app.main``, ``app.cli``), and the worker reaches no HTTP module, not even
through the domain modules it imports.

Every import counts, also one inside a function: a lazy import hides a circle from the
interpreter, not from the reader."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "worker", "solver", "migrations", "bench")


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in (REPO / pkg).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


def _imported_names(path: Path, package: str, mods: dict[str, Path]) -> set[str]:
    """Dotted names a module imports: ``from a import b`` gives ``a.b`` when that is a module,
    else ``a``; relative imports are resolved against ``package``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                names.add(full if full in mods else base)
    return names


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(edges between product modules, every imported name per module)."""
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    raw: dict[str, set[str]] = {}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        raw[mod] = _imported_names(path, package, mods)
        for name in raw[mod]:
            target = name
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != mod:
                edges[mod].add(target)
    return edges, raw


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_circle_in_product_code() -> None:
    edges, _ = import_graph()
    assert len(edges) > 80 and "worker.runner" in edges  # the walk found the code
    assert cycles(edges) == []


def test_cycles_finds_a_circle() -> None:
    """The check itself: a two-module and a three-module circle are reported."""
    edges = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(cycles(edges)) == [["a", "b"], ["c", "d", "e"]]


def _imports_of(raw: dict[str, set[str]], layer: str) -> dict[str, set[str]]:
    return {m: names for m, names in raw.items() if m == layer or m.startswith(layer + ".")}


def _offenders(imports: dict[str, set[str]], roots: tuple[str, ...]) -> list[str]:
    return sorted(f"{m} -> {n}" for m, names in imports.items() for n in names
                  if n.split(".")[0] in roots)


def test_layers() -> None:
    """``app`` never imports ``worker`` or pyspark; ``solver`` never imports ``app`` or
    ``worker``, and pyspark only under ``solver/spark``."""
    _, raw = import_graph()
    assert _offenders(_imports_of(raw, "app"), ("worker", "pyspark")) == []
    assert _offenders(_imports_of(raw, "solver"), ("app", "worker")) == []
    outside_spark = {m: n for m, n in _imports_of(raw, "solver").items()
                     if not m.startswith("solver.spark")}
    assert _offenders(outside_spark, ("pyspark",)) == []


HTTP_LAYER = ("app.api", "app.main", "app.cli")
DOMAIN = ("app.core", "app.schemas", "app.services")


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_the_domain_never_imports_the_http_layer() -> None:
    """What the API and the worker share imports nothing of the routes, the middleware or the
    entry points: the HTTP layer stands on the domain, never the other way round."""
    _, raw = import_graph()
    domain = {m: names for m, names in raw.items() if _within(m, DOMAIN)}
    assert len(domain) > 40  # the walk found the domain
    assert sorted(f"{m} -> {n}" for m, names in domain.items() for n in names
                  if _within(n, HTTP_LAYER)) == []


def reached(edges: dict[str, set[str]], roots: list[str], forbidden: tuple[str, ...]
            ) -> list[str]:
    """Every chain of imports from one of ``roots`` to a module under ``forbidden``, as
    ``"a -> b -> c"`` (the shortest found first, one per forbidden module)."""
    parent: dict[str, str | None] = {r: None for r in roots}
    queue = list(roots)
    found = []
    while queue:
        node = queue.pop(0)
        for child in sorted(edges.get(node, ())):
            if child in parent:
                continue
            parent[child] = node
            if _within(child, forbidden):
                chain, at = [child], node
                while at is not None:
                    chain.append(at)
                    at = parent[at]
                found.append(" -> ".join(reversed(chain)))
            else:
                queue.append(child)
    return found


def test_the_worker_reaches_no_http_module() -> None:
    """``worker`` imports only the domain side of ``app``, and so does every module it
    imports, all the way down."""
    edges, _ = import_graph()
    roots = sorted(m for m in edges if _within(m, ("worker",)))
    assert reached(edges, roots, HTTP_LAYER) == []
    domain = reached(edges, roots, ("app.core.orm", "app.services.filestore.storage"))
    assert len(domain) == 2  # the walk does reach the domain


def test_reached_finds_a_chain() -> None:
    """The check itself: a module two imports away is reported with its chain."""
    edges = {"w": {"s"}, "s": {"api.x", "core"}, "core": set(), "api.x": set()}
    assert reached(edges, ["w"], ("api",)) == ["w -> s -> api.x"]
    assert reached(edges, ["core"], ("api",)) == []
