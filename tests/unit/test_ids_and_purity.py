"""UUIDv7 ids, and architecture rules: the write-side domain imports no drivers; the fold
worker imports no event store."""

import ast
import itertools
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from memledger_platform.ids import uuid7

DOMAIN = Path(__file__).resolve().parents[2] / "services/ingest/memledger_ingest/domain"
ALLOWED_PACKAGES = {"pydantic", "memledger_schemas"}
ALLOWED_PREFIX = "memledger_ingest.domain"


# --- uuid7 ----------------------------------------------------------------------------------


def test_a_uuid7_has_version_7_and_the_rfc_variant() -> None:
    ident = uuid7()

    assert ident.version == 7
    assert ident.variant == uuid.RFC_4122


def test_ten_thousand_uuid7s_made_in_a_row_strictly_increase() -> None:
    ids = [uuid7() for _ in range(10_000)]

    assert all(a < b for a, b in itertools.pairwise(ids))
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in ids)


def test_a_uuid7_carries_the_current_unix_time_in_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    ident = uuid7()
    after = time.time_ns() // 1_000_000

    # A burst may borrow a few milliseconds ahead; never more than one per 4,096 ids.
    assert before <= ident.int >> 80 <= after + 5_000


def test_uuid7s_made_on_many_threads_are_all_distinct() -> None:
    made: list[list[uuid.UUID]] = [[] for _ in range(4)]

    def make(into: list[uuid.UUID]) -> None:
        into.extend(uuid7() for _ in range(2_500))

    threads = [threading.Thread(target=make, args=(into,)) for into in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len({i for ids in made for i in ids}) == 10_000
    for ids in made:
        assert ids == sorted(ids)


# --- purity of the domain -------------------------------------------------------------------


def forbidden_imports(source: str) -> list[str]:
    """The modules ``source`` imports that a pure domain module may not."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            bad += [alias.name for alias in node.names if not _allowed(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            if node.level > 1:
                bad.append("." * node.level + (node.module or ""))
            elif node.level == 0 and not _allowed(node.module or ""):
                bad.append(node.module or "")
    return bad


def _allowed(module: str) -> bool:
    top = module.split(".", maxsplit=1)[0]
    if top in sys.stdlib_module_names or top in ALLOWED_PACKAGES:
        return True
    return module == ALLOWED_PREFIX or module.startswith(ALLOWED_PREFIX + ".")


def domain_modules() -> list[Path]:
    return sorted(DOMAIN.rglob("*.py"))


def test_the_domain_folder_is_where_the_architecture_test_looks() -> None:
    names = {path.name for path in domain_modules()}

    assert {"decide.py", "streams.py", "errors.py"} <= names


@pytest.mark.parametrize("path", domain_modules(), ids=lambda p: p.name)
def test_a_domain_module_imports_only_the_standard_library_pydantic_and_schemas(
        path: Path) -> None:
    assert forbidden_imports(path.read_text()) == [], (
        f"{path.name} must stay pure: no drivers, web frameworks or platform code below domain/")


@pytest.mark.parametrize("source", [
    "import psycopg",
    "import nats.aio.client",
    "from eventsourcing.persistence import Recorder",
    "from fastapi import FastAPI",
    "import starlette",
    "from memledger_platform.ids import uuid7",
    "from memledger_platform import clock",
    "from memledger_ingest.core.writer import GroupCommitWriter",
    "from memledger_ingest import writer",
    "from .. import writer",
    "def f() -> None:\n    import orjson\n",
])
def test_the_purity_check_catches_a_driver_or_platform_import(source: str) -> None:
    assert forbidden_imports(source) != []


@pytest.mark.parametrize("source", [
    "from collections.abc import Callable",
    "import uuid",
    "from pydantic import BaseModel",
    "from memledger_schemas import commands as c",
    "from memledger_ingest.domain.errors import Conflict",
    "from . import streams",
])
def test_the_purity_check_lets_the_allowed_imports_through(source: str) -> None:
    assert forbidden_imports(source) == []


# --- the rebuild's fold worker starts light ------------------------------------------------


def test_the_fold_worker_imports_neither_the_event_store_nor_the_event_schemas() -> None:
    # It is started for every parallel rebuild, and begins folding only once imported:
    # the store's imports (eventsourcing, pydantic and the schemas) were half its start.
    # The event types and the upcasting registry are plain Python: a worker decodes with them.
    heavy = ("eventsourcing", "pydantic", "memledger_schemas", "memledger_platform.eventstore")
    light = ("memledger_schemas", "memledger_schemas.event_types", "memledger_schemas.upcasting")
    probe = ("import sys, memledger_projector.core.fold_worker; "
             f"print(sorted(m for m in sys.modules if m.startswith({heavy!r}) "
             f"and m not in {light!r}))")

    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           check=True).stdout.strip()

    assert found == "[]"
