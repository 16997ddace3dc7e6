"""The fault suite's results tables, printed at the end of the run (by ``tests/conftest.py``,
from the tests' reports). (Its full suite is marked ``faults``: see ``tests/conftest.py``.)"""

from collections.abc import Iterator

import pytest

from tests.support import FAULT_TABLE


@pytest.fixture
def results_tables(request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """Append a results table here to have it printed at the end of the run."""
    tables: list[str] = []
    yield tables
    # Carried by the test's report: with workers (pytest-xdist) the test ran in another
    # process than the one that prints the summary.
    request.node.user_properties += [(FAULT_TABLE, text) for text in tables]
