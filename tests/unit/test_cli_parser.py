"""A command parses itself alone: `up` starts each service as a process of its own, and every
other command's module costs a start about a second of CPU."""

import subprocess
import sys

import pytest

from memledger_cli.main import COMMANDS, SERVICES, parser

OTHER_COMMANDS = ("memledger_cli.operators", "memledger_cli.admin", "memledger_cli.bench",
                  "memledger_cli.cluster_up", "memledger_cli.status", "fastapi")


@pytest.mark.parametrize("argv", [["up"], *([name] for name in SERVICES),
                                  ["relay", "--partition", "1"],
                                  ["projector", "--partition", "0"], ["status", "--json"],
                                  ["bench", "search", "--items", "10"], ["verify", "--json"],
                                  ["admin", "list-keys", "--tenant", "t"], ["replay"]])
def test_a_command_parsed_alone_reads_as_it_does_among_all(argv: list[str]) -> None:
    alone = vars(parser(argv[0]).parse_args(argv))
    among_all = vars(parser().parse_args(argv))
    assert alone == among_all


def test_a_service_parser_refuses_what_the_whole_parser_refuses() -> None:
    with pytest.raises(SystemExit):
        parser("enricher").parse_args(["enricher", "--partition", "1"])
    with pytest.raises(SystemExit):
        parser().parse_args(["enricher", "--partition", "1"])


def test_a_service_started_by_name_imports_no_other_commands_module() -> None:
    script = ("import sys; from memledger_cli import main\n"
              "try:\n    main.main(['relay', '--help'])\nexcept SystemExit:\n    pass\n"
              f"print(sorted(m for m in {OTHER_COMMANDS!r} if m in sys.modules))")
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           check=True, timeout=60)
    assert shown.stdout.strip().splitlines()[-1] == "[]"


def test_the_whole_help_still_lists_every_command() -> None:
    shown = subprocess.run([sys.executable, "-m", "memledger_cli", "--help"],
                           capture_output=True, text=True, check=True, timeout=60)
    for command in ("up", *SERVICES, *COMMANDS):
        assert f"    {command}" in shown.stdout, command
