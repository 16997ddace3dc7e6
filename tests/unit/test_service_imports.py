"""A service's start imports what it uses: each start of `up` runs eight such processes, and
what every one of them imports for nothing is paid eight times (and at every restart)."""

import subprocess
import sys

import pytest

from memledger_cli.main import SERVICES


def _run(script: str) -> list[str]:
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True, timeout=60)
    return shown.stdout.strip().splitlines()


@pytest.mark.parametrize("module", [SERVICES["relay"][0], SERVICES["enricher"][0],
                                    "memledger_cli.up"])
def test_a_service_imports_neither_aiohttp_nor_every_commands_validator(module: str) -> None:
    shown = _run("import sys, memledger_cli.main, " + module + "\n"
                 "from memledger_schemas.commands import CommandBatch\n"
                 "print(sorted(m for m in sys.modules if m.startswith('aiohttp.')))\n"
                 "print(CommandBatch.__pydantic_complete__)")
    assert shown == ["[]", "False"]


def test_aiohttp_imported_after_nats_is_the_whole_module() -> None:
    shown = _run("import memledger_platform, nats.aio.transport as transport\n"
                 "import aiohttp\n"
                 "from aiohttp import web\n"
                 "print(aiohttp.ClientTimeout(total=1).total, web.Application.__name__)\n"
                 "print(transport.aiohttp.WSMsgType.BINARY.name)")
    assert shown == ["1 Application", "BINARY"]


def test_a_deferred_command_schema_still_refuses_what_it_refused() -> None:
    shown = _run("from memledger_schemas.commands import CommandBatch\n"
                 "from pydantic import ValidationError\n"
                 "try:\n    CommandBatch.model_validate({'commands': [{'command': 'nope'}]})\n"
                 "except ValidationError as error:\n    print(error.errors()[0]['type'])")
    assert shown == ["union_tag_invalid"]


def test_the_stand_in_is_found_as_the_module_and_a_missing_module_stays_missing() -> None:
    shown = _run("import importlib.util, sys, memledger_platform\n"
                 "print(importlib.util.find_spec('aiohttp').name, "
                 "type(sys.modules['aiohttp']).__name__)\n"
                 "memledger_platform._import_on_first_use('no_such_module_here')\n"
                 "try:\n    import no_such_module_here\nexcept ImportError:\n    print('absent')")
    assert shown == ["aiohttp _ImportedOnFirstUse", "absent"]
