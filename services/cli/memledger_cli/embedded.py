"""The embedded stack: real PostgreSQL and nats-server from pip wheels under ``MEMLEDGER_HOME``,
owned by this process (stopped with it, and replaced if a killed run left them behind)."""

import asyncio
import logging
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from memledger_ingest.bootstrap import Endpoints
from memledger_platform.engines import EmbeddedNats, EmbeddedPostgres, parent_death_preexec
from memledger_platform.settings import Settings

log = logging.getLogger(__name__)


@contextmanager
def engines(settings: Settings) -> Iterator[Endpoints]:
    """Start (or, in distributed mode, just name) the engines; stop what was started."""
    if settings.mode == "distributed":
        yield Endpoints(settings.postgres_dsn or "", settings.nats_url or "")
        return
    home = settings.home.expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    postgres = EmbeddedPostgres(home / "postgres", port=settings.postgres_port,
                                port_setting="MEMLEDGER_POSTGRES_PORT")
    nats = EmbeddedNats(home, port=settings.nats_port,
                        port_setting="MEMLEDGER_NATS_PORT")
    try:
        dsn = postgres.start().dsn
        url = nats.start()
        yield Endpoints(dsn, url)
    finally:
        nats.stop()
        postgres.stop()


async def supervise(name: str, argv: list[str], env: dict[str, str], stop: asyncio.Event
                    ) -> None:
    """Keep a child process running until ``stop`` is set: restart it (after a pause) if it
    dies, then stop it with SIGTERM (SIGKILL after 20 s). The child gets SIGTERM if this
    process dies first, so it never outlives its supervisor."""
    while not stop.is_set():
        # Popen returns right after fork/exec; the preexec only calls prctl and getppid (no
        # locks), so it is safe although this process has threads.
        proc = subprocess.Popen(  # noqa: ASYNC220
            argv, env=env, preexec_fn=parent_death_preexec(signal.SIGTERM))  # noqa: PLW1509
        exited = asyncio.ensure_future(asyncio.to_thread(proc.wait))
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({exited, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if stop.is_set():
            await _terminate(proc, exited)
            return
        log.warning("%s exited with code %s; restarting it", name, proc.returncode)
        await asyncio.sleep(1.0)


async def _terminate(proc: "subprocess.Popen[bytes]", exited: "asyncio.Future[int]") -> None:
    if proc.poll() is None:
        proc.terminate()
    try:
        await asyncio.wait_for(asyncio.shield(exited), 20.0)
    except TimeoutError:
        proc.kill()
        await exited
