"""``memledger <command>``: the console entry point."""

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from memledger_platform import logs
from memledger_platform.deployment import DeploymentMismatch
from memledger_platform.engines import EngineStartError
from memledger_platform.http_server import PortBusyError
from memledger_platform.settings import Settings, SettingsError, load_settings


def _up(args: argparse.Namespace, settings: Settings) -> int:
    from memledger_cli.up import up

    up(settings)
    return 0


SERVICES = {
    "ingest": ("memledger_ingest.bootstrap", "run the ingest service alone (distributed mode)"),
    "relay": ("memledger_relay.bootstrap", "run the relay alone: event store -> JetStream "
              "(distributed mode; `up` runs it for you)"),
    "projector": ("memledger_projector.bootstrap", "run the projector alone: events -> read "
                  "models (distributed mode; `up` runs it for you)"),
    "vectors": ("memledger_vectors.bootstrap", "run the vector projector alone: events -> "
                "the vector index, which it owns (one per index; `up` runs it for you)"),
    "enricher": ("memledger_enricher.bootstrap", "run the enricher alone: events -> "
                 "embeddings and extractions -> ingest (distributed mode; `up` runs it)"),
    "lifecycle": ("memledger_lifecycle.bootstrap", "run the lifecycle scheduler "
                  "alone: policies and consolidation -> ingest (distributed mode; `up` runs "
                  "it)"),
    "query": ("memledger_query.bootstrap", "run the query service alone: reads, search and "
              "context (distributed mode; stateless, run as many as you like)"),
}
"""Services a distributed deployment runs one process each of: module with ``run(settings)``."""

PARTITIONED = ("relay", "projector")
"""Services that can serve one partition of the events only (``--partition``, ADR 0016)."""


def _service(args: argparse.Namespace, settings: Settings) -> int:
    from memledger_platform.lifecycle import run_service

    module = importlib.import_module(SERVICES[args.command][0])
    run_service(module.run(settings))
    return 0


COMMANDS = {
    "replay": ("memledger_cli.operators", "add_parsers"),
    "rebuild": ("memledger_cli.operators", "add_parsers"),
    "verify": ("memledger_cli.operators", "add_parsers"),
    "mcp": ("memledger_cli.mcp_command", "add_parser"),
    "admin": ("memledger_cli.admin", "add_admin_parser"),
    "erase": ("memledger_cli.erase", "add_erase_parser"),
    "status": ("memledger_cli.status", "add_parser"),
    "cluster": ("memledger_cli.cluster_up", "add_parser"),
    "bench": ("memledger_cli.bench", "add_bench_parser"),
}
"""The other commands: the module that adds each one's parser (with its handler), and how."""


def parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser; with ``only``, that command's alone: ``up`` starts each service
    as a process of its own, and importing every other command's module (the operators' HTTP
    models, the benches) would cost each start about a second of CPU."""
    root = argparse.ArgumentParser(prog="memledger", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if only in (None, "up"):
        commands.add_parser("up", help="run memledger (embedded engines by default)"
                            ).set_defaults(handler=_up)
    for name, (_, text) in SERVICES.items():
        if only in (None, name):
            _add_service(commands, name, text)
    adders = dict.fromkeys(adder for name, adder in COMMANDS.items() if only in (None, name))
    for module, function in adders:  # a module adding several commands is called once
        getattr(importlib.import_module(module), function)(commands)
    return root


def _add_service(commands: "argparse._SubParsersAction[argparse.ArgumentParser]", name: str,
                 text: str) -> None:
    command = commands.add_parser(name, help=text)
    command.set_defaults(handler=_service)
    if name in PARTITIONED:
        command.add_argument(
            "--partition", type=int, default=None, metavar="I",
            help="serve partition I of the events only (0 to MEMLEDGER_EVENT_PARTITIONS-1;"
            " default: every partition, or MEMLEDGER_EVENT_PARTITION)")


def main(argv: Sequence[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    named = given[0] if given else None
    known = named == "up" or named in SERVICES or named in COMMANDS
    args = parser(named if known else None).parse_args(given)
    try:
        partition = getattr(args, "partition", None)
        settings = load_settings(**({} if partition is None else {"event_partition": partition}))
    except SettingsError as error:
        print(f"memledger: {error}", file=sys.stderr)
        return 2
    logs.configure(settings.log_level, settings.log_format)
    handler: Callable[[argparse.Namespace, Settings], int] = args.handler
    try:
        return handler(args, settings)
    except (EngineStartError, PortBusyError, DeploymentMismatch) as error:
        print(f"memledger: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
