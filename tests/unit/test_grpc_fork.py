"""A child started with a ``preexec_fn`` from a process serving gRPC runs its preexec alone:
gRPC's fork handlers (which restart its threads in the child, where it can hang before exec)
are off in every process that imports a first-party package before grpc."""

import subprocess
import sys

import pytest

CHILD = """
import asyncio, os, subprocess, sys
import {module}
import grpc

async def main() -> None:
    server = grpc.aio.server()
    server.add_insecure_port("127.0.0.1:0")
    await server.start()

    def preexec() -> None:
        os.write(1, str(len(os.listdir("/proc/self/task"))).encode())

    child = await asyncio.to_thread(subprocess.Popen, ["true"], preexec_fn=preexec)
    await asyncio.to_thread(child.wait)
    await server.stop(None)

asyncio.run(main())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("module", [
    "memledger_platform.grpc_server",
    "memledger_query.entrypoints.grpc_api",
    "memledger_ingest.entrypoints.grpc_api",
    "memledger_cli.main",
])
def test_a_forked_child_has_one_thread_before_its_exec(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD.format(module=module)],
                          capture_output=True, timeout=60, check=True,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.stdout == b"1", done.stderr.decode()[-2000:]
