"""Fixtures of the live tests: a gateway named by SANDGATE_URL and SANDGATE_TOKEN (the Go test
clients/python/python_test.go starts one and runs this suite; `make test` runs that).

Without them the live tests skip, and under CI=true they fail: CI must run every suite."""

from __future__ import annotations

import os
import uuid
from typing import Iterator

import pytest

import sandgate


def require(cond: bool, why: str) -> None:
    if cond:
        return
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true and " + why)
    pytest.skip(why)


@pytest.fixture
def gateway() -> Iterator[sandgate.Gateway]:
    require(bool(os.environ.get("SANDGATE_URL")), "SANDGATE_URL is not set: run through clients/python's Go test (go test ./clients/python)")
    with sandgate.Gateway() as g:
        yield g


@pytest.fixture
def docker_profile() -> str:
    p = os.environ.get("SANDGATE_TEST_DOCKER_PROFILE", "")
    require(bool(p), "no docker profile (SANDGATE_TEST_DOCKER_PROFILE): the Go test sets one when the engine and sandbox image are there")
    return p


@pytest.fixture
def sbx(gateway: sandgate.Gateway) -> Iterator[sandgate.Sandbox]:
    with sandgate.Sandbox.create(labels={"test": uuid.uuid4().hex}, gateway=gateway) as s:
        yield s
