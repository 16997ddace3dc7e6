"""``memledger <command>``: the console entry point."""

import argparse
import sys
from collections.abc import Callable, Sequence

from memledger_platform import logs
from memledger_platform.engines import EngineStartError
from memledger_platform.http_server import PortBusyError
from memledger_platform.settings import Settings, SettingsError, load_settings


def _up(args: argparse.Namespace, settings: Settings) -> int:
    from memledger_cli.up import up

    up(settings)
    return 0


def _ingest(args: argparse.Namespace, settings: Settings) -> int:
    from memledger_ingest.bootstrap import run
    from memledger_platform.lifecycle import run_service

    run_service(run(settings))
    return 0


def _relay(args: argparse.Namespace, settings: Settings) -> int:
    from memledger_ingest.relay_service import run
    from memledger_platform.lifecycle import run_service

    run_service(run(settings))
    return 0


def _projector(args: argparse.Namespace, settings: Settings) -> int:
    from memledger_platform.lifecycle import run_service
    from memledger_projector.bootstrap import run

    run_service(run(settings))
    return 0


def _query(args: argparse.Namespace, settings: Settings) -> int:
    from memledger_platform.lifecycle import run_service
    from memledger_query.bootstrap import run

    run_service(run(settings))
    return 0


def _bench(args: argparse.Namespace, settings: Settings) -> int:
    from memledger_cli.bench import run_bench

    return run_bench(args, settings)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="memledger", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("up", help="run memledger (embedded engines by default)").set_defaults(
        handler=_up)
    commands.add_parser("ingest", help="run the ingest service alone (distributed mode)"
                        ).set_defaults(handler=_ingest)
    commands.add_parser("relay", help="run the relay alone: event store -> JetStream "
                        "(distributed mode; `up` runs it for you)").set_defaults(handler=_relay)
    commands.add_parser("projector", help="run the projector alone: events -> read models "
                        "(distributed mode; `up` runs it for you)").set_defaults(
                            handler=_projector)
    commands.add_parser("query", help="run the query service alone (distributed mode)"
                        ).set_defaults(handler=_query)
    from memledger_cli.bench import add_bench_parser
    from memledger_cli.operators import add_parsers

    add_parsers(commands)

    add_bench_parser(commands).set_defaults(handler=_bench)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as error:
        print(f"memledger: {error}", file=sys.stderr)
        return 2
    logs.configure(settings.log_level, settings.log_format)
    handler: Callable[[argparse.Namespace, Settings], int] = args.handler
    try:
        return handler(args, settings)
    except (EngineStartError, PortBusyError) as error:
        print(f"memledger: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
