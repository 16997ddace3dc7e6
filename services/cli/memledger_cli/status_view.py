"""How ``memledger status`` looks: rich tables on a terminal, one fact per line otherwise."""

from rich.console import Console
from rich.table import Table

from memledger_cli.status import Consumer, Status


def _figure(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def _lag(value: int | None) -> str:
    if value is None:
        return "[yellow]?[/]"
    return "[green]0[/]" if value == 0 else f"[bold red]{value:,}[/]"


def print_tables(status: Status) -> None:
    console = Console()
    console.print(f"[bold]memledger status[/] ({status.mode})")
    console.print(f"  postgres  {status.postgres}\n  nats      {status.nats}", markup=False,
                  highlight=False)
    console.print(_pipeline(status))
    if status.consumers:
        console.print(_consumers(status.consumers))
    if status.dead_letters is not None:
        console.print(_dead_letters(status))
    for error in status.errors:
        console.print(f"[bold red]unreachable[/] {error}", markup=False, highlight=False)
    console.print("[green]caught up[/]" if status.caught_up else "[yellow]not caught up[/]")


def _pipeline(status: Status) -> Table:
    table = Table(title="pipeline (event-store positions)", title_justify="left")
    for column in ("stage", "where", "position", "lag"):
        table.add_column(column, justify="right" if column in ("position", "lag") else "left")
    table.add_row("event store", "committed", _figure(status.committed_position), "")
    if status.relay is not None:
        table.add_row("relay", status.relay.stream, _figure(status.relay.relayed_position),
                      _lag(status.relay.lag))
    for projection in status.projections:
        table.add_row(f"projection {projection.name}", projection.source,
                      _figure(projection.position), _lag(projection.lag))
    return table


def _consumers(consumers: list[Consumer]) -> Table:
    streams = sorted({c.stream for c in consumers})
    table = Table(title=f"JetStream consumers ({', '.join(streams)})", title_justify="left")
    table.add_column("stream", no_wrap=True)
    table.add_column("durable", overflow="fold")  # the figures keep their width, names fold
    for column in ("pending", "unacked", "redelivered", "waiting", "acked at", "lag"):
        table.add_column(column, justify="right", no_wrap=True, min_width=len(column))
    for c in consumers:
        table.add_row(c.stream.rsplit("_", 1)[-1].lower(), c.name, _figure(c.pending),
                      _figure(c.ack_pending), _figure(c.redelivered), _figure(c.waiting),
                      "" if c.stream.endswith("INTAKE") else _figure(c.acked_position),
                      "" if c.stream.endswith("INTAKE") else _lag(c.lag))
    return table


def _dead_letters(status: Status) -> Table:
    assert status.dead_letters is not None
    table = Table(title=f"dead letters ({status.dead_letters.stream})", title_justify="left")
    table.add_column("subject")
    table.add_column("messages", justify="right")
    for subject, count in status.dead_letters.by_subject.items():
        table.add_row(subject, f"[red]{count:,}[/]")
    table.add_row("[bold]total[/]", _figure(status.dead_letters.total))
    return table


def print_lines(status: Status) -> None:
    for line in lines(status):
        print(line)


def lines(status: Status) -> list[str]:
    """The status as ``key: facts`` lines, for logs and pipes."""
    out = [f"mode: {status.mode} postgres={status.postgres} nats={status.nats}",
           f"committed: position={_plain(status.committed_position)}"]
    if status.relay is not None:
        out.append(f"relay: stream={status.relay.stream} position="
                   f"{status.relay.relayed_position} sequence={status.relay.stream_sequence} "
                   f"lag={_plain(status.relay.lag)}")
    out += [f"projection {p.name}: source={p.source} position={_plain(p.position)} "
            f"lag={_plain(p.lag)}" for p in status.projections]
    out += [f"consumer {c.stream}/{c.name}: pending={c.pending} unacked={c.ack_pending} "
            f"redelivered={c.redelivered} waiting={c.waiting} acked_sequence={c.acked_sequence}"
            + ("" if c.acked_position is None else
               f" acked_position={c.acked_position} lag={_plain(c.lag)}")
            for c in status.consumers]
    if status.dead_letters is not None:
        out.append(f"dead letters: stream={status.dead_letters.stream} "
                   f"total={status.dead_letters.total}")
        out += [f"dead letters {subject}: {count}"
                for subject, count in status.dead_letters.by_subject.items()]
    out += [f"error: {error}" for error in status.errors]
    out.append(f"caught up: {'yes' if status.caught_up else 'no'}")
    return out


def _plain(value: int | None) -> str:
    return "?" if value is None else str(value)
