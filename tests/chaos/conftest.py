"""The chaos runs get an apiserver of their own (``chaos_apiserver``), one per test module.

Their controllers watch the whole cluster, as a production controller does, so on the session's
apiserver they would also list, cache and weigh every Workload, Node and namespace the rest of the
suite left behind (nothing is deleted: the test apiserver runs no namespace controller). How much a
run of a few seconds gets done, and so whether the faults it draws land on the writes a test
audits, would then depend on which tests ran before it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import kueue_apiserver
from tests.envtest import ApiServer


@pytest.fixture(scope="module")
def chaos_apiserver() -> Iterator[ApiServer]:
    with kueue_apiserver() as api:
        yield api
