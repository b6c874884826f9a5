"""The architecture as the source says it: imports point one way, and the table is reached only
through its handle. Read from the syntax trees of every module of the package, every import
counted (lazy ones inside functions and ``TYPE_CHECKING`` ones included)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The package's folders (pyproject.toml's package-dir): the shared core, three components, the CLI.
LAYERS = {"lakecluster": "core", "stream": "stream", "compaction": "compaction", "index": "index", "cli": "cli"}
COMPONENTS = {"stream", "compaction", "index"}
# Between components only the compactor keeping the index in sync after its commits.
ALLOWED_BETWEEN_COMPONENTS = {("compaction", "lakecluster.index.sync")}
# ``python -m lakecluster`` runs the command line: the one module of the core that may import it.
ENTRY_POINT = REPO / "lakecluster" / "__main__.py"
HANDLE = REPO / "lakecluster" / "table"  # the table handle's package


@dataclass(frozen=True)
class Module:
    path: Path
    layer: str
    tree: ast.Module

    @property
    def name(self) -> str:
        return str(self.path.relative_to(REPO))


def modules() -> Iterator[Module]:
    for folder, layer in LAYERS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            yield Module(path, layer, ast.parse(path.read_text(), str(path)))


def layer_of(imported: str) -> str | None:
    """The layer of an imported module name (None: not the package's)."""
    parts = imported.split(".")
    if parts[0] != "lakecluster":
        return None
    if len(parts) > 1 and parts[1] in LAYERS and parts[1] != "lakecluster":
        return parts[1]
    return "core"


def imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, module) of every import in the tree, at any depth; ``from a import b`` gives both
    ``a`` and ``a.b`` (``b`` may be a module)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def forbidden_import(module: Module, imported: str) -> bool:
    target = layer_of(imported)
    if target is None or target == module.layer:
        return False
    if module.layer == "cli":
        return False  # the composition root wires everything together
    if module.layer == "core":
        return not (module.path == ENTRY_POINT and target == "cli")
    if target == "core":
        return False
    if target in COMPONENTS:  # one component importing another
        allowed = {m for layer, m in ALLOWED_BETWEEN_COMPONENTS if layer == module.layer}
        return not any(imported == m or imported.startswith(m + ".") for m in allowed)
    return True  # a component importing the command line


def test_imports_point_from_the_cli_to_the_components_to_the_core() -> None:
    wrong = [f"{m.name}:{line} imports {name}" for m in modules() for line, name in imports(m.tree)
             if forbidden_import(m, name)]  # fmt: skip
    assert wrong == []


def test_the_layer_rule_sees_lazy_and_type_checking_imports() -> None:
    """The check above would catch what it must: a made-up module with each kind of import."""
    source = """
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from lakecluster.stream.job import StreamJob
def f():
    from lakecluster.index.prune import prune
    import lakecluster.cli
"""
    fake = Module(REPO / "compaction" / "fake.py", "compaction", ast.parse(source))
    found = [name for _, name in imports(fake.tree) if forbidden_import(fake, name)]
    assert "lakecluster.stream.job" in found and "lakecluster.index.prune" in found and "lakecluster.cli" in found
    allowed = Module(REPO / "compaction" / "fake.py", "compaction",
                     ast.parse("from lakecluster.index.sync import sync\nfrom lakecluster.table import LakeTable"))
    assert [name for _, name in imports(allowed.tree) if forbidden_import(allowed, name)] == []
    core = Module(REPO / "lakecluster" / "fake.py", "core", ast.parse("from lakecluster.compaction import planner"))
    assert [name for _, name in imports(core.tree) if forbidden_import(core, name)]


# -- the table handle --------------------------------------------------------------------------

# Outside the handle nothing opens a Delta table, builds a sketch store or a process-wide storage
# setting: they are the handle's (``lakecluster.table.LakeTable``).
FORBIDDEN_CALLS = {"open_table", "SketchStore", "DeltaTable", "configure"}


def handle_violations(module_name: str, tree: ast.Module) -> list[str]:
    out = []
    for node in ast.walk(tree):
        # ``<anything>.table.path``: the table's location, which only the handle's paths work out.
        if (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Attribute)
                and node.value.attr == "table"):  # fmt: skip
            out.append(f"{module_name}:{node.lineno} reads .table.path")
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in FORBIDDEN_CALLS and not (name == "configure" and not _on_storage(func)):
                out.append(f"{module_name}:{node.lineno} calls {name}")
    return out


def _on_storage(func: ast.expr) -> bool:
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "storage"


def test_only_the_table_handle_reaches_the_table() -> None:
    wrong = [v for m in modules() if not m.path.is_relative_to(HANDLE) for v in handle_violations(m.name, m.tree)]
    assert wrong == []


def test_the_handle_rule_sees_each_way_around_the_handle() -> None:
    source = """
uri = config.table.path
table = open_table(uri)
store = SketchStore(uri)
dt = deltalake.DeltaTable(uri)
storage.configure(config.storage)
"""
    found = handle_violations("fake.py", ast.parse(source))
    assert [v.split(" ", 1)[1] for v in found] == ["reads .table.path", "calls open_table", "calls SketchStore",
                                                   "calls DeltaTable", "calls configure"]  # fmt: skip


def test_every_package_of_the_source_tree_is_in_the_distribution() -> None:
    """A folder with modules that pyproject.toml's ``packages`` leaves out is missing from a wheel
    (``pip install .``, the Docker image), though an editable install still imports it."""
    import tomllib

    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    folders = {name: REPO / folder for name, folder in setup["package-dir"].items()}
    found = set()
    for name, root in folders.items():
        for init in root.rglob("__init__.py"):
            parts = init.parent.relative_to(root).parts
            found.add(".".join((name, *parts)))
    assert found - listed == set(), f"packages missing from pyproject.toml: {sorted(found - listed)}"
