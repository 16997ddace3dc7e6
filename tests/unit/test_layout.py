"""One folder per process: no service imports another service, so each can be read, run and
scaled on its own. What two services share lives in ``memledger_platform`` (adapters, the
read-model contract, the embedder) or ``memledger_schemas`` (the contracts); only the CLI, the
composition root of ``memledger up`` and the operator tools, knows them all."""

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = {"ingest", "relay", "projector", "vectors", "enricher", "lifecycle", "query"}
OURS = {*SERVICES, "platform", "schemas", "cli", "client"}
ALLOWED: dict[str, set[str]] = {
    **{service: {service, "platform", "schemas"} for service in SERVICES},
    "platform": {"platform", "schemas"},
    "schemas": {"schemas"},
    "client": {"client", "schemas"},
    "cli": OURS,
}
"""What each package of ours may import (of ours)."""


def _package_dirs() -> dict[str, Path]:
    found = {path.parent.name: path for path in ROOT.glob("services/*/memledger_*")}
    return {**found, "schemas": ROOT / "schemas" / "memledger_schemas"}


def _imports(source: str) -> Iterator[tuple[int, str]]:
    """(line, module) of every absolute import, at any depth of the module."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def _package_of(module: str) -> str | None:
    top = module.partition(".")[0]
    name = top.removeprefix("memledger_")
    return name if top.startswith("memledger_") and name in OURS else None


def _reaches(package: str, root: Path) -> list[str]:
    """Every import in ``package`` (its files under ``root``) of a package it may not use."""
    wrong = []
    for path in sorted(root.rglob("*.py")):
        if "grpc/v1" in path.as_posix():  # generated from the protos
            continue
        for line, module in _imports(path.read_text()):
            used = _package_of(module)
            if used is not None and used not in ALLOWED[package]:
                wrong.append(f"{path.relative_to(root.parent)}:{line} imports {module}")
    return wrong


def test_every_package_of_ours_is_one_the_rule_names() -> None:
    assert set(_package_dirs()) == OURS


@pytest.mark.parametrize("package", sorted(OURS))
def test_each_package_imports_only_what_its_place_allows(package: str) -> None:
    assert _reaches(package, _package_dirs()[package]) == []


def test_the_rule_catches_a_service_reaching_into_another(tmp_path: Path) -> None:
    (tmp_path / "views.py").write_text("def f() -> None:\n"
                                       "    from memledger_projector.core import store\n")
    (tmp_path / "ok.py").write_text("from memledger_platform.readmodel import schema\n")
    assert [w.split(" imports ")[1] for w in _reaches("query", tmp_path)] == [
        "memledger_projector.core"]


def test_the_rule_lets_the_client_use_the_contracts_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "results.py").write_text("from memledger_schemas.api.reads import Basis\n"
                                         "import memledger_platform.auth\n")
    assert [w.split(" imports ")[1] for w in _reaches("client", tmp_path)] == [
        "memledger_platform.auth"]
