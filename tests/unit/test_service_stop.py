"""A service stops when signalled, and one whose stop cannot finish is ended after the grace
period instead of outliving the `memledger up` that started it."""

import signal
import subprocess
import sys
import textwrap

import pytest

from memledger_platform.lifecycle import STUCK_EXIT_CODE

_SERVICE = textwrap.dedent("""
    import asyncio, os, sys
    from memledger_platform.lifecycle import run_service, run_until_signalled

    async def main(stop):
        print("ready", flush=True)
        await stop.wait()
        if sys.argv[1] == "prompt":
            return
        if sys.argv[1] == "writes-to-a-full-pipe":  # as logging to an unread stderr would
            while True:
                os.write(2, b"x" * 65536)
        await asyncio.Event().wait()  # as a flush to a NATS server that is gone would

    run_service(run_until_signalled(main, grace_seconds=float(sys.argv[2])))
""")


def _signalled(how: str, grace: float, sig: int = signal.SIGTERM
               ) -> "subprocess.Popen[bytes]":
    proc = subprocess.Popen([sys.executable, "-c", _SERVICE, how, str(grace)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    proc.send_signal(sig)
    return proc


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_service_that_finishes_its_stop_exits_cleanly(sig: int) -> None:
    proc = _signalled("prompt", grace=30, sig=sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


def test_a_stop_that_cannot_finish_is_ended_after_the_grace_period_naming_the_setting(
        ) -> None:
    proc = _signalled("hangs", grace=0.5)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == STUCK_EXIT_CODE
    assert b"did not stop within 0.5 s" in err
    assert b"MEMLEDGER_STOP_GRACE_SECONDS" in err


def test_a_service_blocked_writing_to_an_unread_pipe_is_still_ended() -> None:
    proc = _signalled("writes-to-a-full-pipe", grace=0.5)
    assert proc.wait(timeout=30) == STUCK_EXIT_CODE  # nobody reads its stderr meanwhile
    assert proc.stderr is not None
    proc.stderr.close()


def test_a_service_runs_with_the_collector_tuned_for_it() -> None:
    """Startup objects frozen out of the collector's sight, and young collections rarer than
    Python's default (700): checked in a process of its own, as the settings are global."""
    script = textwrap.dedent("""
        import gc
        from memledger_platform.lifecycle import GC_YOUNG_THRESHOLD, run_service

        async def main():
            return gc.get_threshold(), gc.get_freeze_count()

        (young, middle, old), frozen = run_service(main())
        assert (young, middle, old) == (GC_YOUNG_THRESHOLD, 10, 10), (young, middle, old)
        assert GC_YOUNG_THRESHOLD > 700 and frozen > 0, frozen
    """)
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr.decode()
