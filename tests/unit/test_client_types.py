"""The Python client's types are the API's own document (kit/client/models.py is the
rendering of the OpenAPI document the API serves), and the client needs nothing but
the standard library."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from kit.api.app import create_app
from kit.client.openapi_types import render, type_of
from kit.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_the_client_models_are_the_apis_document() -> None:
    app = create_app(Settings(database_url="postgresql+psycopg://nobody@127.0.0.1:1/none"))
    committed = (ROOT / "kit" / "client" / "models.py").read_text()
    assert committed == render(app.openapi()), (
        "regenerate: curl -s localhost:8080/openapi.json | "
        "python -m kit.client.openapi_types > kit/client/models.py"
    )


def test_schema_types() -> None:
    assert type_of({"type": "string"}) == "str"
    assert type_of({"anyOf": [{"type": "integer"}, {"type": "null"}]}) == "int | None"
    assert type_of({"enum": ["a", "b"]}) == 'Literal["a", "b"]'
    assert type_of({"type": "array", "items": {"$ref": "#/components/schemas/RunOut"}}) == (
        "list[RunOut]"
    )
    assert type_of({"$ref": "#/components/schemas/RunOut"}, quote=True) == '"RunOut"'
    assert type_of({"type": "object", "additionalProperties": {"type": "integer"}}) == (
        "dict[str, int]"
    )


def test_the_client_imports_the_standard_library_only() -> None:
    for path in (ROOT / "kit" / "client").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert (
                    top in sys.stdlib_module_names
                    or name.startswith("kit.client")
                    or (top == "__future__")
                ), (path.name, name)
