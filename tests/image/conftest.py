"""The image tier (``pytest.mark.image``): builds (or reuses) Atoll's OCI image and runs it with runc. It runs only with
``ATOLL_IMAGE_TEST=1`` (``make image-test`` sets it), since a cold build takes longer than the
rest of ``make test`` allows; without it, or on a machine that cannot build the image, every test
here skips naming why."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.admission.fabric import Fabric
from tests.image.oci import Bundle, Image, build, missing

IMAGE_ENV = "ATOLL_IMAGE_TEST"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if item.get_closest_marker("image")]
    if not ours:
        return
    if os.environ.get(IMAGE_ENV) != "1":
        reason = f"builds Atoll's OCI image (minutes when cold): run `make image-test` or set {IMAGE_ENV}=1"
    else:
        reason = missing() or ""
    if reason:
        for item in ours:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def image() -> Image:
    try:
        return build()
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def bundle(image: Image, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bundle]:
    where = tmp_path_factory.mktemp("oci")
    where.chmod(0o755)  # the image's user reads the unpacked root through it
    yield Bundle.unpack(image, where)


@pytest.fixture
def fabric(kube_client: Any, namespace: str) -> Fabric:
    return Fabric(kube_client, namespace)
