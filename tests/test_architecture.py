"""The architecture as the source says it: imports point one way, and the table is reached only
through its handle. Read from the syntax trees of every module of the package, every import
counted (lazy ones inside functions and ``TYPE_CHECKING`` ones included)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The package's folders (pyproject.toml's package-dir): the shared core, the components, the CLI.
LAYERS = {"lakecluster": "core", "stream": "stream", "compaction": "compaction", "index": "index",
          "workload": "workload", "layout": "layout", "cli": "cli"}
COMPONENTS = {"stream", "compaction", "index", "workload", "layout"}
# What a component may import of another, in one direction: compaction -> layout -> workload ->
# core. The compactor follows the layout (all of ``layout``), keeps the index in sync after its
# commits (``index.sync``) and expires captures (the workload package's own names, none of its
# modules); the layout is decided on the captured workload (all of ``workload``).
ALLOWED_BETWEEN_COMPONENTS = {
    ("compaction", "lakecluster.index.sync"),
    ("compaction", "lakecluster.layout"),
    ("layout", "lakecluster.workload"),
}
PUBLIC_ONLY = {("compaction", "lakecluster.workload")}  # the package's names, not its modules
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
        if any(imported == m or imported.startswith(m + ".") for m in allowed):
            return False
        public = {m for layer, m in PUBLIC_ONLY if layer == module.layer}
        return not any(imported == m or _public_name(m, imported) for m in public)
    return True  # a component importing the command line


def _public_name(package: str, imported: str) -> bool:
    """``imported`` is a name the package exports (``__all__`` of its ``__init__``), not a module."""
    if not imported.startswith(package + "."):
        return False
    name = imported[len(package) + 1:]
    init = REPO / LAYER_FOLDERS[package.split(".")[1]] / "__init__.py"
    exported: set[str] = set()
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            exported = set(ast.literal_eval(node.value))
    return name in exported


LAYER_FOLDERS = {layer: folder for folder, layer in LAYERS.items()}


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


def test_the_layers_point_one_way_from_compaction_to_layout_to_workload() -> None:
    """The compactor follows the layout and expires captures through the workload package's own
    names; the layout rewrites nothing (no compaction import) and decides on the workload, which
    knows neither."""
    def found(layer: str, source: str) -> list[str]:
        fake = Module(REPO / layer / "fake.py", layer, ast.parse(source))
        return [name for _, name in imports(fake.tree) if forbidden_import(fake, name)]

    assert found("compaction", "from lakecluster.layout.auto_layout import AutoLayout") == []
    assert found("compaction", "from lakecluster.workload import expire") == []
    assert found("compaction", "from lakecluster.workload.capture import read_capture") != []
    assert found("layout", "from lakecluster.workload.captured import captured_queries") == []
    assert found("layout", "from lakecluster.compaction.planner import Group") != []
    assert found("workload", "from lakecluster.layout.model import WorkloadModel") != []
    assert found("workload", "from lakecluster.compaction import Compactor") != []
    assert found("stream", "from lakecluster.layout import auto_layout") != []


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



def test_java_sources_live_in_their_component_and_ship_in_the_distribution() -> None:
    """A Java class sits in the folder of the component its package names (the core's
    ``lakecluster.delta`` in ``lakecluster/jvm/``, the listener's ``lakecluster.workload`` in
    ``workload/jvm/``), and pyproject.toml ships each folder's sources, which are compiled on
    first use."""
    import tomllib

    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {name: REPO / folder for name, folder in setup["package-dir"].items()}
    home = {"lakecluster.delta": "lakecluster", "lakecluster.workload": "lakecluster.workload"}
    sources = [(name, path) for name, root in folders.items() for path in sorted(root.glob("jvm/*.java"))]
    assert {name for name, _ in sources} == set(home.values())
    for name, path in sources:
        package = re.search(r"^package ([\w.]+);", path.read_text(), re.MULTILINE)
        assert package is not None and home.get(package.group(1)) == name, f"{path} belongs elsewhere"
        assert "jvm/*.java" in setup["package-data"].get(name, []), f"{name}'s Java sources are not shipped"

# -- no import circle ----------------------------------------------------------------------------

MODULE_PREFIX = {"lakecluster": "lakecluster", **{folder: f"lakecluster.{folder}" for folder in LAYERS
                                                 if folder != "lakecluster"}}  # fmt: skip


def module_name(module: Module) -> str:
    folder = module.path.relative_to(REPO).parts[0]
    parts = list(module.path.relative_to(REPO / folder).with_suffix("").parts)
    return ".".join([MODULE_PREFIX[folder], *(parts[:-1] if parts[-1] == "__init__" else parts)])


def import_graph(found: list[Module]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at any depth. ``from p import m`` counts as an
    import of ``p.m`` when that is a module, else of ``p`` (a name ``p``'s ``__init__`` defines)."""
    names = {module_name(m): m for m in found}
    graph: dict[str, set[str]] = {}
    for name, module in names.items():
        package = name if module.path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                subs = {f"{base}.{alias.name}" for alias in node.names} & names.keys()
                edges.update(subs)
                if len(subs) < len(node.names):
                    edges.add(base)
        graph[name] = {e for e in edges if e in names and e != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_through_others() -> None:
    """Lazy and ``TYPE_CHECKING`` imports count: a circle hidden in a function is still one."""
    assert circles(import_graph(list(modules()))) == []


def test_the_circle_check_finds_a_circle_through_a_lazy_import() -> None:
    a = Module(REPO / "lakecluster" / "table" / "fake_a.py", "core",
               ast.parse("from lakecluster.table import fake_b"))
    b = Module(REPO / "lakecluster" / "table" / "fake_b.py", "core",
               ast.parse("def f():\n    from lakecluster.table.fake_a import X"))
    c = Module(REPO / "lakecluster" / "table" / "fake_c.py", "core", ast.parse("from .fake_a import X"))
    graph = import_graph([a, b, c])
    assert graph["lakecluster.table.fake_c"] == {"lakecluster.table.fake_a"}  # relative imports resolved
    assert circles(graph) == [["lakecluster.table.fake_a", "lakecluster.table.fake_b"]]


# -- the benches ---------------------------------------------------------------------------------


def test_every_bench_module_imports() -> None:
    """The benches are not run by the suite; importing each catches a module they use that moved."""
    import importlib

    benches = sorted(p.stem for p in (REPO / "bench").glob("*.py") if p.stem != "__init__")
    failed = {}
    for name in benches:
        try:
            importlib.import_module(f"bench.{name}")
        except Exception as e:  # any failure to import is the finding
            failed[name] = f"{type(e).__name__}: {e}"
    assert benches and failed == {}


# -- sizes ---------------------------------------------------------------------------------------

MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 300
# What reads best whole, and why: each a parser or a format, split only by splitting its rules.
EXEMPT_MODULES = {
    "lakecluster/table/snapshot.py": "the Delta log's snapshot format: classic, multi-part and V2 checkpoints with "
                                     "sidecars, commits, protocol, metadata and domain metadata, column-pruned",
    "lakecluster/sketches.py": "the boundary sketches' format: the sketch of each type, its merge, ranks and "
                               "serialization (docs/sketches.md)",
    "stream/parse.py": "the JSON record parser: the rules of docs/records.md, each reason code, in vectorised passes",
    "index/store.py": "the index's storage format: the manifest, base and segment files, their merge and "
                      "publication (docs/index.md)",
}  # fmt: skip
EXEMPT_CLASSES = {
    ("index/store.py", "IndexStore"): "the store of that format, whole (its manifest's protocol reads as one)",
}


def test_every_module_and_class_is_small_enough_to_read_in_one_sitting() -> None:
    too_long = []
    for m in modules():
        lines = len(m.path.read_text().splitlines())
        if lines > MAX_MODULE_LINES and m.name not in EXEMPT_MODULES:
            too_long.append(f"{m.name}: {lines} lines")
        for node in ast.walk(m.tree):
            size = node.end_lineno - node.lineno + 1 if isinstance(node, ast.ClassDef) and node.end_lineno else 0
            if size > MAX_CLASS_LINES and (m.name, getattr(node, "name", "")) not in EXEMPT_CLASSES:
                too_long.append(f"{m.name}: class {getattr(node, 'name', '')} of {size} lines")
    assert too_long == []
    # The exemptions are still needed: one that is not goes from the list.
    names = {m.name: m for m in modules()}
    assert all(len(names[n].path.read_text().splitlines()) > MAX_MODULE_LINES for n in EXEMPT_MODULES)
    assert "compaction/loop.py" not in EXEMPT_MODULES and "layout/advise.py" not in EXEMPT_MODULES


# -- one handle per process ------------------------------------------------------------------------

PROCESS_START = REPO / "cli" / "context.py"  # the command's handle, built once


def handle_constructions(module: Module) -> list[str]:
    """Where ``module`` builds a ``LakeTable``, other than as a service's default for a caller that
    gave it none (``table or LakeTable(config)`` in an ``__init__``: tests and embedding)."""
    defaults = set()
    for fn in ast.walk(module.tree):
        if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
            for node in ast.walk(fn):
                if (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or)
                        and isinstance(node.values[0], ast.Name) and node.values[0].id == "table"):  # fmt: skip
                    defaults.update(id(v) for v in node.values[1:])
    return [f"{module.name}:{node.lineno}" for node in ast.walk(module.tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "LakeTable"
            and id(node) not in defaults]  # fmt: skip


def test_a_table_handle_is_built_only_where_a_process_starts() -> None:
    """No component builds a second handle mid-process (a layout adopted, a stream's id resolved:
    the one handle follows them)."""
    built = [b for m in modules() if m.path != PROCESS_START for b in handle_constructions(m)]
    assert built == []
    service = Module(REPO / "compaction" / "fake.py", "compaction", ast.parse(
        "class C:\n    def __init__(self, config, table=None):\n        self.table = table or LakeTable(config)\n"
        "    def later(self):\n        self.table = LakeTable(self.config)\n"))  # fmt: skip
    assert handle_constructions(service) == ["compaction/fake.py:5"]
