"""Rewrite the Inputs and Outputs tables of every Terraform module's and example's README
from its HCL (between the BEGIN_TF_DOCS / END_TF_DOCS markers), the way terraform-docs
would. `python scripts/terraform_docs.py`; tests/deploy checks the tables are current."""

from __future__ import annotations

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


def _default(body: dict) -> str:
    if "default" not in body:
        return "required"
    value = body["default"]
    if isinstance(value, str):
        return f"`{unquote(value)}`" if value.startswith('"') else f"`{value}`"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, (list, dict)):
        return (
            f"`{value}`".replace("'", '"')
            if value
            else ("`[]`" if isinstance(value, list) else "`{}`")
        )
    return f"`{value}`"


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
