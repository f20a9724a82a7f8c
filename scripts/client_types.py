"""Write ``sodm_client/types.py``: one TypedDict per response schema of the service's OpenAPI
document, so the Python client's return values are typed from the API itself.

    .venv/bin/python scripts/client_types.py          # rewrite the file
    .venv/bin/python scripts/client_types.py --check  # exit 1 when it is out of date

``tests/test_client_types.py`` runs the check: a change of a response schema must come with
the regenerated file.
"""

from __future__ import annotations

import argparse
import keyword
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "sodm_client" / "types.py"
# the bodies the client returns, and every schema they refer to
ROOTS = ("DatasetOut", "DatasetList", "JobOut", "JobList", "ModelOut", "ModelList",
         "AliasOut", "AliasList", "PredictResponse", "PredictionJobOut",
         "PredictionJobList", "AlgorithmList", "Problem")

HEADER = '''"""Typed shapes of the sodm API's JSON bodies, generated from its OpenAPI document by
``scripts/client_types.py`` (do not edit; rerun it when a response schema changes).

Each TypedDict is one component schema; keys the schema does not require are
``NotRequired``. Values of open objects (``params``, ``metrics``, ...) are ``Any``.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict
'''


def _refs(schema: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str):
            found.add(ref.rsplit("/", 1)[-1])
        for v in schema.values():
            found |= _refs(v)
    elif isinstance(schema, list):
        for v in schema:
            found |= _refs(v)
    return found


def _type(schema: dict[str, Any]) -> str:
    """The Python annotation of a JSON schema."""
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            parts = list(dict.fromkeys(_type(s) for s in schema[key]))
            return "Any" if "Any" in parts else " | ".join(parts)
    if "enum" in schema:
        return "Literal[" + ", ".join(repr(v) for v in schema["enum"]) + "]"
    if "const" in schema:
        return f"Literal[{schema['const']!r}]"
    kind = schema.get("type")
    if kind == "string":
        return "str"
    if kind == "integer":
        return "int"
    if kind == "number":
        return "float"
    if kind == "boolean":
        return "bool"
    if kind == "null":
        return "None"
    if kind == "array":
        return f"list[{_type(schema.get('items') or {})}]"
    if kind == "object":
        extra = schema.get("additionalProperties")
        return f"dict[str, {_type(extra)}]" if isinstance(extra, dict) and extra else \
            "dict[str, Any]"
    return "Any"


def _class(name: str, schema: dict[str, Any]) -> str:
    doc = (schema.get("description") or "").strip().splitlines()
    lines = [f"class {name}(TypedDict):"]
    if doc:
        lines.append(f'    """{doc[0].rstrip(".")}."""' if len(doc) == 1 else
                     '    """' + "\n    ".join(doc) + '\n    """')
    required = set(schema.get("required", ()))
    props = schema.get("properties") or {}
    for field, sub in props.items():
        if not field.isidentifier() or keyword.iskeyword(field):
            raise SystemExit(f"{name}.{field} is not a Python identifier")
        annotation = _type(sub)
        if field not in required:
            annotation = f"NotRequired[{annotation}]"
        lines.append(f"    {field}: {annotation}")
    if not props and not doc:
        lines.append("    pass")
    return "\n".join(lines)


def render(document: dict[str, Any]) -> str:
    schemas = document["components"]["schemas"]
    wanted: list[str] = []
    todo = list(ROOTS)
    while todo:
        name = todo.pop(0)
        if name in wanted:
            continue
        wanted.append(name)
        todo.extend(sorted(_refs(schemas[name]) - set(wanted)))
    parts = [HEADER.rstrip("\n")]
    for name in sorted(wanted):
        schema = schemas[name]
        if "enum" in schema:
            parts.append(f"{name} = {_type(schema)}")
        else:
            parts.append(_class(name, schema))
    parts.append("__all__ = [\n" + "".join(f"    {n!r},\n" for n in sorted(wanted)) + "]")
    return "\n\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare, do not write")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from app.main import create_app

    text = render(create_app().openapi())
    if args.check:
        if OUT.read_text() != text:
            print(f"{OUT.relative_to(REPO)} is out of date: run scripts/client_types.py",
                  file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
