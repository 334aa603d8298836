"""Fixtures for the controller tests: ``fabric`` is one test's own slice of the real apiserver."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.admission.fabric import Fabric


@pytest.fixture
def fabric(kube_client: Any, namespace: str) -> Iterator[Fabric]:
    yield Fabric(kube_client, namespace)
