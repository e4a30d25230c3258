"""The dependency direction of docs/ARCHITECTURE.md, checked on every import in src/sluice.

    cli | testing → broker | spark | console
        → group | txn | share | features | replication | registry
        → client | cluster | coordinator → storage | schemas → protocol → common

and inside the broker (BROKER_PARTS):

    top (app, services, dispatcher, handlers, topics, …) → registry → observability
        → coordination | share | extensions → replication
        → fatal | authorization | context → network

A package may import its own layer or any layer below, never above. On top of that:
the broker never imports the client library (nor do group, txn and features, which sit
above the client but run inside the broker), Spark and the web console read and write
only through the client (so the console works against any Kafka cluster),
protocol/, storage/ and replication/ never import asyncio or sockets, and replication/
reads no clock, starts no thread and draws no random number (its state machines replay
from a seed). Within the layers, no module
imports itself back through others: the module import graph has no cycle, counting
imports made only for type checking (a type-only back reference is still a cycle in the
design) and imports inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE_ROOT = Path(__file__).resolve().parents[2] / "src" / "sluice"

LAYER = {
    "common": 0,
    "protocol": 1,
    "storage": 2,
    "schemas": 2,
    "client": 3,
    "cluster": 3,
    "coordinator": 3,
    "group": 4,
    "registry": 4,
    "txn": 4,
    "features": 4,
    "share": 4,
    "replication": 4,
    "broker": 5,
    "spark": 5,
    "console": 5,
    "cli": 6,
    "testing": 6,
    "sim": 6,
}
FORBIDDEN_PACKAGES = {
    "broker": {"client"},
    "group": {"client"},
    "registry": {"client", "storage", "cluster", "group", "txn", "features", "share"},
    "txn": {"client"},
    "features": {"client"},
    "share": {"client"},
    "replication": {"client"},
    "sim": {"broker", "client", "cli", "testing"},
    "spark": {"broker", "storage", "cluster", "coordinator", "group", "txn", "features", "share"},
    "console": {"broker", "storage", "cluster", "coordinator", "group", "txn", "features", "share"},
    "client": {"storage", "cluster", "coordinator", "group", "txn", "features", "share"},
}
BROKER_PARTS = {
    "network": 0,
    "fatal": 1,
    "authorization": 1,
    "context": 1,
    "replication": 2,
    "coordination": 3,
    "share": 3,
    "extensions": 3,
    "observability": 4,
    "registry": 5,
}
"""Within sluice.broker (docs/ARCHITECTURE.md): the rank of each subpackage, and of the
three top-level modules the subpackages share (fatal storage errors, authorization, the
request context). A part imports parts of lower rank, never a peer of its own rank, and
never the broker's top (rank 6: ``app``, ``services``, the dispatcher, the handlers,
``topics`` and the rest), which may import any part. Nothing in the broker imports
``app``, which only the CLI and ``sluice.testing`` start."""
BROKER_TOP = 6
NO_IO_PACKAGES = {"protocol", "storage", "common", "replication", "sim", "schemas", "registry"}
NO_IO_MODULES = {"sluice.cluster.controller_core", "sluice.cluster.alter_partition"}
"""Sans-IO modules in a package that is not (the controller's decisions beside its
asyncio shell): no event loop, socket, clock, thread or randomness of their own."""
NO_IO_MODULE_IMPORTS = {"asyncio", "socket", "selectors", "ssl", "time", "threading", "random"}
IO_MODULES = {"asyncio", "socket", "selectors", "ssl"}
NONDETERMINISTIC_MODULES = {"time", "threading", "random", "os", "concurrent", "secrets", "uuid"}
DETERMINISTIC_PACKAGES = {
    "replication": NONDETERMINISTIC_MODULES,
    "sim": NONDETERMINISTIC_MODULES - {"random", "uuid"},
}
"""Packages whose code must behave the same on every run given the same inputs (the
simulator replays runs from a seed), and what they may not import for it: no clock,
thread, file or randomness of their own (the simulator draws from ``random.Random``
instances seeded from its seed, and makes topic ids from numbers)."""


def _imports(source: str, module: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    """Every module ``source`` imports, with its line, relative imports resolved against
    the package of ``module`` (``from ..client import x`` in ``sluice.storage.log`` is
    ``sluice.client``); ``from package import name`` without a module of its own
    (``from sluice import client``, ``from . import index``) names ``package.name``."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                parts = package.split(".")
                assert node.level <= len(parts), f"line {node.lineno}: import beyond the top"
                base = ".".join([*parts[: len(parts) - node.level + 1], node.module or ""])
                base = base.rstrip(".")
            if node.module is None or base == "sluice":
                found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
            else:
                found.append((node.lineno, base))
    return found


def _modules() -> list[Path]:
    return sorted(p for p in SOURCE_ROOT.rglob("*.py"))


def _package_of(path: Path) -> str | None:
    relative = path.relative_to(SOURCE_ROOT).parts
    return relative[0] if len(relative) > 1 else None


def _layer_problems(package: str, imports: list[tuple[int, str]]) -> list[str]:
    """What breaks the layering among the imports of a module of ``package``."""
    problems = []
    for line, name in imports:
        parts = name.split(".")
        if parts[0] in IO_MODULES and package in NO_IO_PACKAGES:
            problems.append(f"line {line}: {package}/ must not import {name} (sans-IO)")
        if parts[0] in DETERMINISTIC_PACKAGES.get(package, ()):
            problems.append(f"line {line}: {package}/ must not import {name} (deterministic)")
        if parts[0] != "sluice" or len(parts) < 2 or parts[1] not in LAYER:
            continue
        target = parts[1]
        if LAYER[target] > LAYER[package]:
            problems.append(
                f"line {line}: {package}/ (layer {LAYER[package]}) imports "
                f"{name} (layer {LAYER[target]})"
            )
        if LAYER[target] == LAYER[package] and target != package:
            problems.append(f"line {line}: {package}/ imports its peer layer {name}")
        if target in FORBIDDEN_PACKAGES.get(package, set()):
            problems.append(f"line {line}: {package}/ must not import {name}")
    return problems


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SOURCE_ROOT)))
def test_imports_respect_the_layers(path: Path) -> None:
    package = _package_of(path)
    if package is None:
        return
    assert package in LAYER, f"package {package!r} is not placed in a layer (docs/ARCHITECTURE.md)"
    imports = _imports(path.read_text(), _module_name(path), is_package=path.name == "__init__.py")
    problems = _layer_problems(package, imports)
    assert not problems, "\n".join(problems)


def _module_io_problems(module: str, imports: list[tuple[int, str]]) -> list[str]:
    """What a module of NO_IO_MODULES must not import among ``imports``."""
    return [
        f"line {line}: {module} must not import {name} (sans-IO)"
        for line, name in imports
        if name.split(".")[0] in NO_IO_MODULE_IMPORTS
    ]


@pytest.mark.parametrize("module", sorted(NO_IO_MODULES))
def test_sans_io_modules_do_no_io(module: str) -> None:
    path = SOURCE_ROOT.joinpath(*module.split(".")[1:]).with_suffix(".py")
    assert path.is_file(), f"{module} is named in NO_IO_MODULES but does not exist"
    problems = _module_io_problems(module, _imports(path.read_text(), module))
    assert not problems, "\n".join(problems)


def test_the_sans_io_module_check_names_what_it_imports() -> None:
    imports = _imports(
        "import time\nfrom asyncio import Event\nimport random as r\nimport dataclasses",
        "sluice.cluster.controller_core",
    )
    assert _module_io_problems("sluice.cluster.controller_core", imports) == [
        "line 1: sluice.cluster.controller_core must not import time (sans-IO)",
        "line 2: sluice.cluster.controller_core must not import asyncio (sans-IO)",
        "line 3: sluice.cluster.controller_core must not import random (sans-IO)",
    ]


def _broker_part(module: str) -> str:
    """The part of sluice.broker a module of it belongs to (its subpackage, or one of the
    shared top-level modules), or "top"."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[2] in BROKER_PARTS else "top"


def _broker_problems(module: str, imports: list[tuple[int, str]]) -> list[str]:
    """What breaks the order of the broker's parts among the imports of ``module``."""
    part = _broker_part(module)
    rank = BROKER_PARTS.get(part, BROKER_TOP)
    problems = []
    for line, name in imports:
        if not name.startswith("sluice.broker."):
            continue
        if name == "sluice.broker.app" or name.startswith("sluice.broker.app."):
            problems.append(f"line {line}: {module} imports the broker's app")
            continue
        target = _broker_part(name)
        target_rank = BROKER_PARTS.get(target, BROKER_TOP)
        if target == part or rank == BROKER_TOP:
            continue
        if target_rank > rank or (target_rank == rank and rank != BROKER_PARTS["fatal"]):
            problems.append(
                f"line {line}: broker.{part} (rank {rank}) imports {name} "
                f"({'the top' if target_rank == BROKER_TOP else f'rank {target_rank}'})"
            )
    return problems


@pytest.mark.parametrize(
    "path",
    sorted((SOURCE_ROOT / "broker").rglob("*.py")),
    ids=lambda p: str(p.relative_to(SOURCE_ROOT)),
)
def test_the_broker_parts_import_downwards(path: Path) -> None:
    module = _module_name(path)
    imports = _imports(path.read_text(), module, is_package=path.name == "__init__.py")
    problems = _broker_problems(module, imports)
    assert not problems, "\n".join(problems)


def test_the_broker_part_check_names_what_breaks_the_order() -> None:
    module = "sluice.broker.share.dead_letters"
    imports = [
        (1, "sluice.broker.replication.partition"),
        (2, "sluice.broker.network.peers"),
        (3, "sluice.broker.topics"),
        (4, "sluice.broker.extensions.views"),
        (5, "sluice.broker.app"),
    ]
    assert _broker_problems(module, imports) == [
        "line 3: broker.share (rank 3) imports sluice.broker.topics (the top)",
        "line 4: broker.share (rank 3) imports sluice.broker.extensions.views (rank 3)",
        "line 5: sluice.broker.share.dead_letters imports the broker's app",
    ]
    assert _broker_problems("sluice.broker.topics", imports[:4]) == []


@pytest.mark.parametrize(
    ("source", "module", "is_package", "named"),
    [
        ("from ..client import x", "sluice.storage.log", False, "sluice.client"),
        ("from .. import client", "sluice.storage.log", False, "sluice.client"),
        ("from ...client.admin import x", "sluice.storage.sub.log", False, "sluice.client.admin"),
        ("from ...client import x", "sluice.storage.sub", True, "sluice.client"),
        ("from sluice import client", "sluice.storage.log", False, "sluice.client"),
        ("import sluice.client.admin", "sluice.storage.log", False, "sluice.client.admin"),
    ],
)
def test_the_layer_check_resolves_every_import_form(
    source: str, module: str, is_package: bool, named: str
) -> None:
    imports = _imports(source, module, is_package=is_package)
    assert imports == [(1, named)]
    problems = _layer_problems("storage", imports)
    assert problems == [f"line 1: storage/ (layer 2) imports {named} (layer 3)"]


def test_the_layer_check_allows_relative_imports_within_a_package() -> None:
    imports = _imports("from .segment import Segment\nfrom . import index", "sluice.storage.log")
    assert imports == [(1, "sluice.storage.segment"), (2, "sluice.storage.index")]
    assert _layer_problems("storage", imports) == []


def _module_name(path: Path) -> str:
    parts = ("sluice", *path.relative_to(SOURCE_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module → the sluice modules it imports. ``from package import name`` points at
    the submodule ``package.name`` when there is one, else at the package."""
    paths = {_module_name(path): path for path in _modules()}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name in paths)
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = node.module if node.level == 0 else ".".join([*base, node.module or ""])
                source = (source or "").rstrip(".")
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    if submodule in paths:
                        targets.add(submodule)
                    elif source in paths:
                        targets.add(source)
        targets.discard(name)
        graph[name] = targets
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in import order, the first repeated at the end),
    or None: a depth-first search that reports the first edge back onto its path."""
    finished: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(module: str) -> list[str] | None:
        path.append(module)
        on_path.add(module)
        for target in sorted(graph[module]):
            if target in on_path:
                return [*path[path.index(target) :], target]
            if target not in finished and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        on_path.discard(module)
        finished.add(module)
        return None

    for module in sorted(graph):
        if module not in finished and (cycle := visit(module)) is not None:
            return cycle
    return None


def test_no_import_cycles() -> None:
    cycle = _find_cycle(_import_graph())
    assert cycle is None, "import cycle: " + " → ".join(m.removeprefix("sluice.") for m in cycle)


def test_the_cycle_check_names_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _find_cycle(graph) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_every_package_starts_with_a_docstring() -> None:
    for init in SOURCE_ROOT.rglob("__init__.py"):
        tree = ast.parse(init.read_text())
        assert ast.get_docstring(tree), f"{init.relative_to(SOURCE_ROOT)} has no docstring"
