"""The ``memledger mcp`` subcommand; the server (and the MCP SDK) load only when it runs."""

import argparse
from typing import Any

from memledger_platform.settings import Settings


def add_parser(commands: Any) -> None:
    mcp = commands.add_parser("mcp", help="serve memledger's tools to agents over MCP (stdio)")
    mcp.add_argument("--url", help="memledger's HTTP API (MEMLEDGER_URL, default "
                     "http://127.0.0.1:8420)")
    mcp.add_argument("--tenant", help="tenant (MEMLEDGER_TENANT)")
    mcp.add_argument("--space", help="space used when a tool names none (MEMLEDGER_SPACE, "
                     "default 'default'; created on first remember)")
    mcp.add_argument("--agent", help="agent id the server's writes carry (MEMLEDGER_AGENT)")
    mcp.set_defaults(handler=_run)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    from memledger_cli.mcp_server import run_command

    return run_command(args, settings)
