"""Rewrite the Inputs and Outputs tables of every Terraform module's and example's README
from its HCL (between the BEGIN_TF_DOCS / END_TF_DOCS markers), the way terraform-docs
would. `python scripts/terraform_docs.py`; tests/deploy checks the tables are current."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.deploy.terraform_files import (
    blocks,
    example_dirs,
    module_dirs,
    unquote,
    variable_type,
)

BEGIN, END = "<!-- BEGIN_TF_DOCS -->", "<!-- END_TF_DOCS -->"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _plain(value: object) -> object:
    """A default as HCL wrote it, without python-hcl2's kept quotes ('"a"' -> 'a')."""
    if isinstance(value, str):
        return unquote(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {unquote(k): _plain(v) for k, v in value.items() if not k.startswith("__")}
    return value


def _default(body: dict) -> str:
    """The default as terraform-docs shows it: a string bare, anything else as JSON
    (`["10.0.0.0/8"]`, `{}`, `true`)."""
    if "default" not in body:
        return "required"
    value = _plain(body["default"])
    if isinstance(value, str):
        return f"`{value}`" if value else '`""`'
    return f"`{json.dumps(value)}`"


def tables(directory: Path) -> str:
    lines = ["## Inputs", "", "| name | type | default | description |"]
    lines.append("| --- | --- | --- | --- |")
    for name, body in sorted(blocks(directory, "variable").items()):
        lines.append(
            f"| `{name}` | `{_cell(variable_type(body))}` | {_cell(_default(body))} "
            f"| {_cell(unquote(body.get('description', '')))} |"
        )
    outputs = blocks(directory, "output")
    lines += ["", "## Outputs", ""]
    if outputs:
        lines += ["| name | description |", "| --- | --- |"]
        for name, body in sorted(outputs.items()):
            lines.append(f"| `{name}` | {_cell(unquote(body.get('description', '')))} |")
    else:
        lines.append("None.")
    return "\n".join([BEGIN, *lines, END])


def current(readme: Path, directory: Path) -> str:
    text = readme.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + tables(directory) + text[end:]


def main() -> int:
    for d in [*module_dirs(), *example_dirs()]:
        readme = d / "README.md"
        readme.write_text(current(readme, d))
        print(f"wrote {readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
