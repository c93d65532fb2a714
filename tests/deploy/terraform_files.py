"""What the deployment tests read of terraform/: HCL parsed with python-hcl2, and
templatefile() rendered in Python with Terraform's semantics for the subset our templates
use (`${name}` substitution, `$${` for a literal `${`, no `%{` directives)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import hcl2

ROOT = Path(__file__).resolve().parents[2]
TERRAFORM = ROOT / "terraform"
MODULES = TERRAFORM / "modules"
EXAMPLES = TERRAFORM / "examples"
BOOTSTRAP = MODULES / "fleet" / "templates" / "bootstrap.sh.tftpl"

_INTERP = re.compile(r"(?<!\$)\$\{([^}]*)\}")


class TemplateError(ValueError):
    pass


def template_variables(text: str) -> set[str]:
    """Names the template interpolates (a `$${` escape is not an interpolation)."""
    names = set()
    for expr in _INTERP.findall(text):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", expr.strip()):
            raise TemplateError(f"only plain variables are supported, found ${{{expr}}}")
        names.add(expr.strip())
    return names


def render(text: str, values: dict[str, Any]) -> str:
    """templatefile(path, values): every interpolated name must be supplied, as Terraform
    requires; numbers render as Terraform renders whole numbers, booleans as true/false."""
    if re.search(r"(?<!%)%\{", text):
        raise TemplateError("template directives (%{...}) are not supported by this renderer")
    missing = template_variables(text) - set(values)
    if missing:
        raise TemplateError(f"vars map does not contain key(s) {sorted(missing)}")

    def value(match: re.Match[str]) -> str:
        v = values[match.group(1).strip()]
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float) and v.is_integer():
            return str(int(v))
        return str(v)

    out = _INTERP.sub(value, text)
    return out.replace("$${", "${").replace("%%{", "%{")


def unquote(value: Any) -> Any:
    """python-hcl2 keeps the quotes of string literals: '"hi"' -> 'hi'."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


@cache
def parse(path: Path) -> dict[str, Any]:
    with path.open() as f:
        return hcl2.load(f)


def module_dirs() -> list[Path]:
    return sorted(p for p in MODULES.iterdir() if (p / "main.tf").exists())


def example_dirs() -> list[Path]:
    return sorted(p for p in EXAMPLES.iterdir() if (p / "main.tf").exists())


def blocks(directory: Path, kind: str) -> dict[str, dict[str, Any]]:
    """Every `variable` or `output` block of a module, by name, over all its .tf files."""
    found: dict[str, dict[str, Any]] = {}
    for tf in sorted(directory.glob("*.tf")):
        for block in parse(tf).get(kind, []):
            for name, body in block.items():
                found[unquote(name)] = {**body, "__file__": tf.name}
    return found


def locals_of(directory: Path) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for tf in sorted(directory.glob("*.tf")):
        for block in parse(tf).get("locals", []):
            merged.update(block)
    return merged


def variable_type(body: dict[str, Any]) -> str:
    """The type expression of a variable block, as written: 'number', 'list(string)'."""
    t = body.get("type", "")
    t = t[2:-1] if isinstance(t, str) and t.startswith("${") and t.endswith("}") else t
    return re.sub(r"\s+", "", str(t))
