"""``memledger bench <scenario> --json``: each scenario measures memledger's path and the raw
engine beside it in the same run, and prints one JSON object."""

import argparse
from typing import Any

from memledger_platform.settings import Settings


def add_bench_parser(commands: Any) -> argparse.ArgumentParser:
    from memledger_cli.bench.embed import SCENARIO as EMBED
    from memledger_cli.bench.ingest import SCENARIO as INGEST
    from memledger_cli.bench.lifecycle import SCENARIO as LIFECYCLE
    from memledger_cli.bench.readside import E2E, REBUILD, TEMPORAL
    from memledger_cli.bench.retrieval import SCENARIO as RETRIEVAL
    from memledger_cli.bench.scale import SCENARIO as SCALE
    from memledger_cli.bench.search import SCENARIO as SEARCH
    from memledger_cli.bench.soak import SCENARIO as SOAK

    bench: argparse.ArgumentParser = commands.add_parser(
        "bench", help="measure a scenario; prints one JSON object with --json")
    scenarios = bench.add_subparsers(dest="scenario", required=True, metavar="SCENARIO")
    for scenario in (INGEST, E2E, TEMPORAL, REBUILD, SEARCH, EMBED,
                     RETRIEVAL, SOAK, LIFECYCLE, SCALE):
        sub = scenarios.add_parser(scenario.name, help=scenario.help)
        sub.add_argument("--json", action="store_true", help="print only the JSON result")
        scenario.add_arguments(sub)
        sub.set_defaults(bench=scenario)
    bench.set_defaults(handler=run_bench)
    return bench


def run_bench(args: argparse.Namespace, settings: Settings) -> int:
    result: int = args.bench.run(args, settings)
    return result
