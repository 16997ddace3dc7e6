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


def _bench(args: argparse.Namespace, settings: Settings) -> int:
    from memledger_cli.bench import run_bench

    return run_bench(args, settings)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="memledger", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("up", help="run memledger (embedded engines by default)").set_defaults(
        handler=_up)
    for name, (_, text) in SERVICES.items():
        command = commands.add_parser(name, help=text)
        command.set_defaults(handler=_service)
        if name in PARTITIONED:
            command.add_argument(
                "--partition", type=int, default=None, metavar="I",
                help="serve partition I of the events only (0 to MEMLEDGER_EVENT_PARTITIONS-1;"
                " default: every partition, or MEMLEDGER_EVENT_PARTITION)")
    from memledger_cli.admin import add_admin_parser
    from memledger_cli.bench import add_bench_parser
    from memledger_cli.cluster_up import add_parser as add_cluster_parser
    from memledger_cli.erase import add_erase_parser
    from memledger_cli.mcp_command import add_parser as add_mcp_parser
    from memledger_cli.operators import add_parsers
    from memledger_cli.status import add_parser as add_status_parser

    add_parsers(commands)
    add_mcp_parser(commands)
    add_admin_parser(commands)
    add_erase_parser(commands)
    add_status_parser(commands)
    add_cluster_parser(commands)

    add_bench_parser(commands).set_defaults(handler=_bench)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
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
