"""The dependency direction of docs/ARCHITECTURE.md, checked on every import in src/sluice.

    cli → broker | spark → group | txn | features → client | cluster | coordinator
        → storage → protocol → common

A package may import its own layer or any layer below, never above. On top of that:
the broker never imports the client library (nor do group, txn and features, which sit
above the client but run inside the broker), Spark reads and writes only through the
client, and protocol/ and storage/ never import asyncio or sockets.
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
    "client": 3,
    "cluster": 3,
    "coordinator": 3,
    "group": 4,
    "txn": 4,
    "features": 4,
    "broker": 5,
    "spark": 5,
    "cli": 6,
}
FORBIDDEN_PACKAGES = {
    "broker": {"client"},
    "group": {"client"},
    "txn": {"client"},
    "features": {"client"},
    "spark": {"broker", "storage", "cluster", "coordinator", "group", "txn", "features"},
    "client": {"storage", "cluster", "coordinator", "group", "txn", "features"},
}
NO_IO_PACKAGES = {"protocol", "storage", "common"}
IO_MODULES = {"asyncio", "socket", "selectors", "ssl"}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def _modules() -> list[Path]:
    return sorted(p for p in SOURCE_ROOT.rglob("*.py"))


def _package_of(path: Path) -> str | None:
    relative = path.relative_to(SOURCE_ROOT).parts
    return relative[0] if len(relative) > 1 else None


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SOURCE_ROOT)))
def test_imports_respect_the_layers(path: Path) -> None:
    package = _package_of(path)
    if package is None:
        return
    assert package in LAYER, f"package {package!r} is not placed in a layer (docs/ARCHITECTURE.md)"
    problems = []
    for line, name in _imports(path):
        parts = name.split(".")
        if parts[0] in IO_MODULES and package in NO_IO_PACKAGES:
            problems.append(f"line {line}: {package}/ must not import {name} (sans-IO)")
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
    assert not problems, "\n".join(problems)


def test_every_package_starts_with_a_docstring() -> None:
    for init in SOURCE_ROOT.rglob("__init__.py"):
        tree = ast.parse(init.read_text())
        assert ast.get_docstring(tree), f"{init.relative_to(SOURCE_ROOT)} has no docstring"
