"""The package shows its architecture: layers with one-way dependencies, checked on every import."""

from __future__ import annotations

import ast
from pathlib import Path

import harness

# Lowest first. A module may import its own layer and the layers below it, never one above.
LAYERS = [
    ("errors", "records", "host", "presentation"),
    ("io",),
    ("datasets",),
    ("retrieval",),
    ("engines",),
    ("evaluation",),
    ("reporting",),
    ("pipeline",),
    ("cli", "__main__", "api"),
]
RANK = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}
PACKAGE = Path(harness.__file__).parent


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "harness" or len(parts) == 1:
        return None  # harness itself (__version__) is below everything
    return RANK[parts[1]]


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            if node.module == "harness":
                yield from ((node.lineno, f"harness.{alias.name}") for alias in node.names
                            if alias.name in RANK)
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)


def test_every_module_belongs_to_a_layer_and_imports_only_downwards():
    violations = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = "harness." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        if module.endswith(".__init__"):
            module = module[: -len(".__init__")]
        own = _layer(module)
        if own is None:
            continue
        for line, imported in _imports(path):
            target = _layer(imported) if imported.startswith("harness") else None
            if target is not None and target > own:
                violations.append(f"{path.relative_to(PACKAGE)}:{line} imports {imported}")
    assert not violations, "\n".join(violations)


def test_no_package_grows_past_a_dozen_modules():
    for package in (p for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()):
        assert len(list(package.glob("*.py"))) <= 13, package.name
