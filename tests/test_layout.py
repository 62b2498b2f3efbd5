"""The package shows its architecture: layers with one-way dependencies, checked on every import."""

from __future__ import annotations

import ast
from pathlib import Path

import harness

# Lowest first. A module may import its own layer and the layers below it, never one above.
LAYERS = [
    ("errors", "records", "host", "presentation", "metering"),
    ("io",),
    ("datasets",),
    ("retrieval",),
    ("runtimes",),
    ("engines",),
    ("evaluation",),
    ("reporting",),
    ("pipeline",),
    ("judging",),
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
                yield from ((node.lineno, f"harness.{alias.name}") for alias in node.names if alias.name in RANK)
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
    for package in (init.parent for init in PACKAGE.rglob("__init__.py") if init.parent != PACKAGE):
        assert len(list(package.glob("*.py"))) <= 13, package.relative_to(PACKAGE)


MAX_LINES = 600  # a module longer than this is a package waiting to exist (docs/development.md, "Layout")


def test_no_module_is_over_600_lines():
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"over {MAX_LINES} lines (split by concern): {long}"


def _module_name(path: Path) -> str:
    parts = ("harness", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _edges(module: str, path: Path):
    """(line, imported module, names taken from it) for every import of a package module in `path`, at the top
    or inside a function. `from harness import __version__` takes a constant the package root defines before it
    imports anything, so it ties nothing; every other name from the root ties the root."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    [*package.split(".")[: len(package.split(".")) - node.level + 1], *filter(None, [base])]
                )
            if base not in MODULES:
                continue
            names = []
            for alias in node.names:
                if f"{base}.{alias.name}" in MODULES:
                    yield node.lineno, f"{base}.{alias.name}", ()
                elif not (base == "harness" and alias.name == "__version__"):
                    names.append(alias.name)
            if names:
                yield node.lineno, base, tuple(names)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), and modules that import themselves."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_two_modules_import_each_other_even_inside_functions():
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for module, path in MODULES.items():
        for _, imported, _names in _edges(module, path):
            graph[module].add(imported)
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_no_private_name_is_used_outside_its_module():
    violations = []
    for module, path in MODULES.items():
        for line, imported, names in _edges(module, path):
            violations += [
                f"{path.relative_to(PACKAGE)}:{line} takes {name} from {imported}"
                for name in names
                if _is_private(name)
            ]
        # A module bound to a name (`from harness.datasets import registry`) and a private attribute read on it.
        bound = {}
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                bound.update(
                    {
                        alias.asname or alias.name: f"{node.module}.{alias.name}"
                        for alias in node.names
                        if f"{node.module}.{alias.name}" in MODULES
                    }
                )
            elif isinstance(node, ast.Import):
                bound.update(
                    {alias.asname: alias.name for alias in node.names if alias.asname and alias.name in MODULES}
                )
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and _is_private(node.attr)
            ):
                violations.append(f"{path.relative_to(PACKAGE)}:{node.lineno} reads {bound[node.value.id]}.{node.attr}")
    assert not violations, "\n".join(violations)


def _name_tests(tree: ast.AST, names: set[str]):
    """(line, literal) for every string literal equal to one of `names` that is compared (``==``, ``!=``, ``in``,
    ``not in``, also inside a tuple, list or set) or passed to ``startswith`` / ``endswith`` (where a name's
    first part, ``openvino`` of ``openvino-int8``, counts too)."""

    def literals(node: ast.AST):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            for element in node.elts:
                yield from literals(element)

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                yield from ((node.lineno, text) for text in literals(side) if text in names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
        ):
            for argument in node.args:
                yield from (
                    (node.lineno, text)
                    for text in literals(argument)
                    if any(name == text or name.startswith(text + "-") for name in names)
                )


def test_no_backend_name_is_tested_outside_the_runtime_registry():
    """The runtimes' policy lives in their records (`harness.runtimes.registry`): elsewhere a backend is looked
    up, never recognised by its name."""
    from harness.runtimes.registry import NAMES

    names = set(NAMES)
    violations = []
    for module, path in MODULES.items():
        if module == "harness.runtimes" or module.startswith("harness.runtimes."):
            continue
        violations += [
            f"{path.relative_to(PACKAGE)}:{line} tests the backend name {text!r}"
            for line, text in _name_tests(ast.parse(path.read_text(encoding="utf-8")), names)
        ]
    assert not violations, "\n".join(violations)


def test_the_backend_name_check_sees_each_way_of_testing_a_name():
    code = (
        'a == "onnx"\nb in ("x", "openvino-int8")\nc.startswith("openvino")\n"torch" != d\n'
        'e == "auto"\nf.startswith("on")\ng = "onnx"\n'
    )
    found = [line for line, _ in _name_tests(ast.parse(code), {"torch", "onnx", "openvino", "openvino-int8"})]
    assert found == [1, 2, 3, 4]


def _documented_modules(text: str) -> set[str]:
    """The modules the layout of docs/development.md lists: its ``harness/`` block, a file's path made from the
    folders above it (by indentation)."""
    block = text[text.index("```\nharness/\n") + 4 :]
    block = block[: block.index("```")]
    found, folders = set(), []
    for line in block.splitlines()[1:]:
        stripped = line.lstrip(" ")
        depth = (len(line) - len(stripped)) // 2
        name = stripped.split(" ", 1)[0]
        if depth == 0:
            break  # the repository's other folders follow the package
        if not name.endswith((".py", "/")):
            continue  # a description's second line
        folders = folders[: depth - 1]
        if name.endswith("/"):
            folders.append(name)
        else:
            found.add("".join(folders) + name)
    return found


def test_the_development_guide_lists_every_module():
    documented = _documented_modules((PACKAGE.parent / "docs" / "development.md").read_text(encoding="utf-8"))
    modules = {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")}
    missing = sorted(path for path in modules - documented if not path.endswith("/__init__.py"))
    stale = sorted(documented - modules)
    assert not missing, "modules missing from docs/development.md's layout: " + ", ".join(missing)
    assert not stale, "docs/development.md lists modules that are gone: " + ", ".join(stale)


# The command line's one door is the Python API: it parses, calls `harness.api`, prints what comes back, and reads an
# option's choices and defaults (the runtimes, the index kinds, the precisions, the engines, the table formats, the
# merge policies, the CSV delimiters, the default model) from the registries through `harness.api.choices` when a
# command is built. Besides the API it may take the errors it translates, the table helpers of
# `harness.presentation`, its own package and the version; nothing else of the library, not even a constant.
CLI_DOORS = ("harness.api", "harness.errors", "harness.presentation", "harness.cli")


def _cli_violations(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [(node.module, alias.name) for alias in node.names]
        else:
            continue
        for module, name in names:
            if module != "harness" and not module.startswith("harness."):
                continue
            if module == "harness" and name == "__version__":
                continue
            if any(module == door or module.startswith(door + ".") for door in CLI_DOORS):
                continue
            found.append(f"{node.lineno}: {module}" + (f".{name}" if name else ""))
    return found


def test_the_command_line_goes_through_the_api_only():
    violations = []
    for module, path in MODULES.items():
        if module == "harness.cli" or module.startswith("harness.cli."):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            violations += [f"{path.relative_to(PACKAGE)}:{found}" for found in _cli_violations(tree)]
    assert not violations, "the command line goes around harness.api:\n" + "\n".join(violations)


def test_the_api_door_check_sees_each_way_around_it():
    code = (
        "from harness.pipeline.evaluate import evaluate_dataset\n"
        "def f():\n    from harness.reporting.report import format_metrics_table\n"
        "import harness.io.cache\n"
        "from harness.runtimes.registry import runtime\n"
        "from harness.api import evaluate\nfrom harness.runtimes.registry import CHOICES\nfrom harness import __version__\n"
        "from harness.errors import HarnessError\nfrom harness.api.choices import backends\n"
        "from harness.records import Run\nimport harness.api.results\nfrom harness.presentation import align\n"
    )
    found = sorted(line.split(":")[0] for line in _cli_violations(ast.parse(code)))
    assert found == ["1", "11", "3", "4", "5", "7"]
