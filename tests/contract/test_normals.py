"""One contract for the jobs' normals: in memory and in Redis.

Every test runs against each implementation; several RedisNormals objects
(no read cache) stand for several workers on one real Valkey/Redis server.
What only Redis does, expiring what a job stopped printing, is in
tests/integration/test_normals_expiry.py.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterator
from itertools import product
from typing import Any

import pytest

from theow_workers.adapters.memory import MemoryNormals
from theow_workers.core.logs.normal import MAX_TEMPLATES

Factory = Callable[[], Any]

RUN = [
    "Resolving dependencies for app",
    "warning: old helper is deprecated",
    "compiled 274 files in 7.7s",
    "",
]


@pytest.fixture(params=["memory", "redis"])
def workers(request: pytest.FixtureRequest) -> Iterator[Factory]:
    if request.param == "memory":
        shared = MemoryNormals()
        yield lambda: shared
        return

    import redis

    from theow_workers.adapters.normals import RedisNormals

    url = request.getfixturevalue("redis_url")
    request.getfixturevalue("redis_client")  # a flushed database
    clients: list[Any] = []

    def real() -> RedisNormals:
        client = redis.Redis.from_url(url)  # a connection per worker
        clients.append(client)
        return RedisNormals(client, ttl=3600, cache_seconds=0)

    yield real
    for client in clients:
        client.close()


def test_a_job_never_learned_has_no_normal(workers):
    normals = workers()

    assert normals.normal("github:acme/app/build") is None
    assert normals.templates("github:acme/app/build") == []


def test_what_a_passing_run_printed_is_normal_and_nothing_else(workers):
    normals = workers()

    kept = normals.learn("build", RUN)

    normal = normals.normal("build")
    assert normal is not None
    assert kept == len(normals.templates("build")) == 3  # the blank line is no template
    assert normal.is_normal("warning: old helper is deprecated")
    assert normal.is_normal("compiled 311 files in 9.2s")  # the numbers are masked
    assert not normal.is_normal("error: cannot find symbol Helper")


def test_each_run_adds_to_the_jobs_normal_and_a_repeated_run_adds_nothing(workers):
    normals = workers()
    normals.learn("build", RUN)

    assert normals.learn("build", RUN) == 3
    assert normals.learn("build", ["Uploading artifact app.tar"]) == 4

    normal = normals.normal("build")
    assert normal is not None
    assert normal.is_normal("Uploading artifact app.tar")
    assert normal.is_normal("Resolving dependencies for app")


def test_jobs_have_their_own_normals(workers):
    normals = workers()
    normals.learn("build", RUN)
    normals.learn("deploy", ["Rolling out to staging"])

    deploy = normals.normal("deploy")
    assert deploy is not None and not deploy.is_normal("warning: old helper is deprecated")
    assert normals.templates("lint") == []


def test_every_worker_sees_what_another_learned(workers):
    first, second = workers(), workers()

    first.learn("build", RUN)

    normal = second.normal("build")
    assert normal is not None and normal.is_normal("warning: old helper is deprecated")
    assert set(second.templates("build")) == set(first.templates("build"))


def test_a_jobs_normal_is_bounded_and_keeps_what_it_printed_last(workers):
    normals = workers()
    # Lines that share no template: a distinct first word each.
    words = ["".join(letters) for letters in product(string.ascii_lowercase, repeat=3)]
    older = [f"{w} started" for w in words[:3000]]
    newer = [f"{w} started" for w in words[3000:6000]]
    normals.learn("build", older, now=1000.0)

    kept = normals.learn("build", newer, now=1001.0)

    assert kept == len(normals.templates("build")) == MAX_TEMPLATES
    normal = normals.normal("build")
    assert normal is not None
    assert all(normal.is_normal(line) for line in newer)
    assert sum(normal.is_normal(line) for line in older) == MAX_TEMPLATES - len(newer)
