"""The fault suite's results tables, printed at the end of the run. (Its full suite is marked
``faults``: see ``tests/conftest.py``.)"""

import pytest

TABLES = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[TABLES] = []


@pytest.fixture
def results_tables(request: pytest.FixtureRequest) -> list[str]:
    """Append a results table here to have it printed at the end of the run."""
    return request.config.stash[TABLES]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    for text in config.stash.get(TABLES, []):
        terminalreporter.write_sep("=", "fault injection")
        terminalreporter.write_line(text)
