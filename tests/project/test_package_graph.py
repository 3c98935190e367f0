"""gpudra's packages import each other without a cycle: data flows one way (objects -> allocator/scheduler ->
results -> presentation), so a package never needs, even indirectly, one that builds on it.

The graph is read from the source with `ast` (no module is imported): every `import` and `from ... import` of a
gpudra module, at module level and inside functions alike (an import moved into a function still ties the two
packages together); only imports under `if TYPE_CHECKING:` are left out, as they never run. A node is a
subpackage of gpudra (`gpudra.api`, `gpudra.gpuplugin`, ...) or a top-level module (`gpudra.quantity`).

The same reading, one level down: inside a folder, files import each other without a cycle either (a circle
between two files is two modules that are really one, or a shared piece that belongs in a lower module)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def _module_parts(path: Path, source_root: Path) -> tuple[list[str], bool]:
    parts = list(path.relative_to(source_root).with_suffix("").parts)
    if parts[-1] == "__init__":
        return parts[:-1], True
    return parts, False


def _node(module: str) -> str:
    """The graph node of a dotted gpudra module: its subpackage or top-level module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _targets(statement: ast.Import | ast.ImportFrom, parts: list[str], is_package: bool) -> list[str]:
    if isinstance(statement, ast.Import):
        return [alias.name for alias in statement.names]
    if not statement.level:
        if statement.module == parts[0]:  # `from gpudra import atomicfile`: the top-level modules it names
            return [f"{statement.module}.{alias.name}" for alias in statement.names]
        return [statement.module or ""]
    package = parts if is_package else parts[:-1]
    base = package[:len(package) - (statement.level - 1)]
    if statement.module:
        return [".".join([*base, statement.module])]
    return [".".join([*base, alias.name]) for alias in statement.names]  # `from .. import mig`: submodules


def package_graph(source_root: Path, package: str = "gpudra") -> dict[str, dict[str, list[str]]]:
    """node -> node it imports -> the `module -> imported module` lines that make the edge."""
    edges: dict[str, dict[str, list[str]]] = {}
    for path in sorted((source_root / package).rglob("*.py")):
        parts, is_package = _module_parts(path, source_root)
        module = ".".join(parts)
        source = _node(module)
        for statement in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for target in _targets(statement, parts, is_package):
                if not target.startswith(package + "."):
                    continue
                destination = _node(target)
                if destination != source:
                    edges.setdefault(source, {}).setdefault(destination, []).append(f"{module} -> {target}")
    return edges


def file_graph(source_root: Path, package: str = "gpudra") -> dict[str, dict[str, list[str]]]:
    """Inside each folder: module -> module of the same folder it imports -> the `module:line -> target` lines.
    A folder's `__init__` is the module named by the folder; `from gpudra.api import load` names the submodule
    `gpudra.api.load` (when there is such a file), else the folder's `__init__`."""
    files: dict[str, tuple[Path, list[str], bool]] = {}
    for path in sorted((source_root / package).rglob("*.py")):
        parts, is_package = _module_parts(path, source_root)
        files[".".join(parts)] = (path, parts, is_package)
    edges: dict[str, dict[str, list[str]]] = {}
    for module, (path, parts, is_package) in files.items():
        folder = ".".join(parts if is_package else parts[:-1])
        for statement in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for target in _file_targets(statement, parts, is_package, files):
                if target == folder:
                    destination = folder
                elif target.startswith(folder + "."):
                    destination = f"{folder}.{target[len(folder) + 1:].split('.')[0]}"
                else:
                    continue  # another folder's module: the package graph's business
                if destination != module and destination in files:
                    edges.setdefault(module, {}).setdefault(destination, []).append(
                        f"{module}:{statement.lineno} -> {target}")
    return edges


def _file_targets(statement: ast.Import | ast.ImportFrom, parts: list[str], is_package: bool,
                  files: dict[str, tuple[Path, list[str], bool]]) -> list[str]:
    if isinstance(statement, ast.Import):
        return [alias.name for alias in statement.names]
    if statement.level:
        package = parts if is_package else parts[:-1]
        base = package[:len(package) - (statement.level - 1)]
        module = ".".join([*base, *([statement.module] if statement.module else [])])
    else:
        module = statement.module or ""
    return [f"{module}.{alias.name}" if f"{module}.{alias.name}" in files else module for alias in statement.names]


def cycles(edges: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in edges.get(node, {}):
            if successor not in index:
                connect(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    nodes = set(edges) | {target for targets in edges.values() for target in targets}
    for node in sorted(nodes):
        if node not in index:
            connect(node)
    return found


def test_gpudra_packages_import_each_other_without_a_cycle() -> None:
    edges = package_graph(ROOT)
    assert {"api", "allocator", "cel", "gpuplugin", "scheduler"} <= set(edges)  # the graph was read at all
    found = cycles(edges)
    report = []
    for component in found:
        report.append(" <-> ".join(component))
        for source in component:
            for target in component:
                for line in edges.get(source, {}).get(target, [])[:3]:
                    report.append(f"    {line}")
    assert not found, "package cycles:\n" + "\n".join(report)


def _report(found: list[list[str]], edges: dict[str, dict[str, list[str]]]) -> str:
    report = []
    for component in found:
        report.append(" <-> ".join(component))
        for source in component:
            for target in component:
                for line in edges.get(source, {}).get(target, [])[:3]:
                    report.append(f"    {line}")
    return "\n".join(report)


def test_files_inside_a_folder_import_each_other_without_a_cycle() -> None:
    edges = file_graph(ROOT)
    assert "gpudra.allocator.allocator" in edges  # the graph was read at all
    found = cycles(edges)
    assert not found, "file cycles:\n" + _report(found, edges)


def _write_tree(root: Path, files: dict[str, str]) -> None:
    """A made-up package for the graph reader: path -> source."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


def test_the_file_graph_finds_a_circle_through_a_function_import_and_a_package_import(tmp_path: Path) -> None:
    """`a` imports `b` at module level; `b` imports `a` inside a function as `from pkg.sub import a` (a submodule
    named through its folder); `c` imports `a` only under TYPE_CHECKING; `pkg.other` imports `pkg.sub.d`: in its own
    folder that is the subpackage `pkg.sub` (whose `__init__` runs first), and `d` is not in `pkg.other`'s folder."""
    files = {
        "pkg/__init__.py": "",
        "pkg/sub/__init__.py": "",
        "pkg/sub/a.py": "from .b import helper\n",
        "pkg/sub/b.py": "def helper():\n    from pkg.sub import a\n    return a\n",
        "pkg/sub/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.a import thing\n",
        "pkg/sub/d.py": "from pkg.other import x\n",
        "pkg/other.py": "from pkg.sub.d import y\n",
    }
    _write_tree(tmp_path, files)
    edges = file_graph(tmp_path, "pkg")
    assert edges == {"pkg.sub.a": {"pkg.sub.b": ["pkg.sub.a:1 -> pkg.sub.b"]},
                     "pkg.sub.b": {"pkg.sub.a": ["pkg.sub.b:2 -> pkg.sub.a"]},
                     "pkg.other": {"pkg.sub": ["pkg.other:1 -> pkg.sub.d"]}}
    assert cycles(edges) == [["pkg.sub.a", "pkg.sub.b"]]


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    """The reader on a made-up package: `a` imports `b` at module level, `b` imports `a` inside a function
    (relative, from a subpackage's __init__), `c` imports `a` only under TYPE_CHECKING."""
    files = {
        "pkg/__init__.py": "",
        "pkg/a/__init__.py": "from pkg.b.tool import helper\n",
        "pkg/b/__init__.py": "def late():\n    from ..a import thing\n    return thing\n",
        "pkg/b/tool.py": "def helper():\n    return 1\n",
        "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import thing\n",
    }
    _write_tree(tmp_path, files)
    edges = package_graph(tmp_path, "pkg")
    assert edges == {"a": {"b": ["pkg.a -> pkg.b.tool"]}, "b": {"a": ["pkg.b -> pkg.a"]}}
    assert cycles(edges) == [["a", "b"]]


def test_the_scheduler_places_pods_without_drivers_controllers_or_compute_domains():
    """kube-scheduler knows ResourceSlices, not the drivers that publish them, and places the pods it is given:
    the workload controllers (gpudra.controllers) run beside it, not inside it (issue #31)."""
    reached: set[str] = set()
    edges = package_graph(ROOT)
    frontier = ["scheduler"]
    while frontier:
        for target in edges.get(frontier.pop(), {}):
            if target not in reached:
                reached.add(target)
                frontier.append(target)
    forbidden = {"controllers", "computedomain", "gpuplugin", "kubeletplugin", "webhook", "cluster", "kubecluster"}
    assert not reached & forbidden, {name: edges["scheduler"].get(name) for name in reached & forbidden}


def reachable(edges: dict[str, dict[str, list[str]]], start: str) -> dict[str, list[str]]:
    """Every node `start` imports, directly or through others -> the import chain (lines) that reaches it first."""
    found: dict[str, list[str]] = {}
    frontier = [(start, [])]
    while frontier:
        node, chain = frontier.pop(0)
        for target, lines in sorted(edges.get(node, {}).items()):
            if target != start and target not in found:
                found[target] = [*chain, lines[0]]
                frontier.append((target, found[target]))
    return found


# The kubelet-plugin helper is generic, as upstream's k8s.io/dynamic-resource-allocation/kubeletplugin: the plugins
# (GPU, compute domain) build on it and register what they keep in its checkpoint; it knows none of them.
PLUGINS_ABOVE_THE_HELPER = ("gpuplugin", "computedomain")


def test_the_kubelet_plugin_helper_imports_no_plugin_even_indirectly() -> None:
    reached = reachable(package_graph(ROOT), "kubeletplugin")
    assert "errors" in reached  # the graph was read at all
    bad = {plugin: reached[plugin] for plugin in PLUGINS_ABOVE_THE_HELPER if plugin in reached}
    assert not bad, "gpudra.kubeletplugin reaches a plugin:\n" + "\n".join(
        f"{plugin}: " + " ; ".join(chain) for plugin, chain in bad.items())


def test_the_helper_check_sees_an_indirect_import(tmp_path: Path) -> None:
    """A helper module importing a plugin through a third package, inside a function: the check must see it."""
    files = {"pkg/__init__.py": "", "pkg/kubeletplugin/__init__.py": "", "pkg/gpuplugin/__init__.py": "",
             "pkg/mid.py": "from pkg.gpuplugin import x\n",
             "pkg/kubeletplugin/a.py": "def f():\n    from pkg import mid\n    return mid\n"}
    _write_tree(tmp_path, files)
    reached = reachable(package_graph(tmp_path, "pkg"), "kubeletplugin")
    assert set(reached) == {"mid", "gpuplugin"}
    assert reached["gpuplugin"] == ["pkg.kubeletplugin.a -> pkg.mid", "pkg.mid -> pkg.gpuplugin"]
