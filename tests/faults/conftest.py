"""The fault suite's switches: the full suite (marker ``faults``) runs only when selected
(``make test-faults``: ``pytest -m faults``); the reduced one runs with everything else. Results
tables are printed at the end of the run."""

import pytest

TABLES = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[TABLES] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "faults" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="the full fault suite runs with `make test-faults`")
    for item in items:
        if item.get_closest_marker("faults") is not None:
            item.add_marker(skip)


@pytest.fixture
def results_tables(request: pytest.FixtureRequest) -> list[str]:
    """Append a results table here to have it printed at the end of the run."""
    return request.config.stash[TABLES]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    for text in config.stash.get(TABLES, []):
        terminalreporter.write_sep("=", "fault injection")
        terminalreporter.write_line(text)
