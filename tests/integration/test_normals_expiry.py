"""A job's normal in Redis follows its recent passing runs: what it stopped printing expires."""

from __future__ import annotations

import pytest

from theow_workers.adapters.normals import RedisNormals

pytestmark = pytest.mark.integration

TTL = 1000


def test_a_line_the_job_stopped_printing_leaves_its_normal_after_the_ttl(redis_client):
    normals = RedisNormals(redis_client, ttl=TTL, cache_seconds=0)
    normals.learn("build", ["warning: old helper is deprecated", "compiling app"], now=0)
    normals.learn("build", ["compiling app"], now=TTL * 0.6)

    normals.learn("build", ["compiling app"], now=TTL * 1.2)

    normal = normals.normal("build")
    assert normal is not None
    assert normal.is_normal("compiling app")
    assert not normal.is_normal("warning: old helper is deprecated")


def test_a_line_every_run_prints_stays_normal(redis_client):
    normals = RedisNormals(redis_client, ttl=TTL, cache_seconds=0)
    for n in range(5):
        normals.learn("build", ["bc: command not found", f"took {n} s"], now=n * TTL * 0.5)

    normal = normals.normal("build")
    assert normal is not None and normal.is_normal("bc: command not found")
