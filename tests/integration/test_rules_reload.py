"""A worker that notices new rules builds their scanner off the failures' path.

Compiling the scanner of a few hundred rules takes seconds when it is not in
the disk cache; a failure that arrives meanwhile is answered by the rules
already served (after ``served.SWAP_WAIT`` at most), not held until the build
is done.
"""

from __future__ import annotations

import threading

import pytest

from tests.conftest import wait_until
from tests.integration.conftest import worker_runtime
from theow_client.messages import SubmitRequest
from theow_client.verdict import Status
from theow_workers.core.resolve import plan as resolver
from theow_workers.core.rules.scanner import Scanner

pytestmark = pytest.mark.integration

FAILURE = {"stderr": "compiling...\nstep failed: BETA is broken\n"}
HELD_AT_MOST = 30  # seconds; only a worker that builds on the failure's path waits this out


def track_rule(name: str, literal: str) -> str:
    return f"name: {name}\nmode: track\nwhen:\n  - {{fact: stderr, contains: {literal}}}\n"


def test_a_failure_right_after_a_rule_change_is_answered_while_the_new_scanner_builds(
    tmp_path, redis_url, redis_client, milvus_uri, collection, minilm, monkeypatch
):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "alpha.rule.yaml").write_text(track_rule("alpha", "ALPHA"))
    runtime = worker_runtime(
        tmp_path, redis_url, milvus_uri, collection, minilm, THEOW_RULES_POLL_SECONDS="0"
    )

    def resolve(failure_id: str):
        return runtime.service.resolve(
            SubmitRequest.from_wire({"failure_id": failure_id, "facts": FAILURE}), failure_id
        )

    assert resolve("before").status is Status.UNMATCHED

    release = threading.Event()

    class HeldScanner(Scanner):
        """The real scanner, its build held until the test lets it finish."""

        def __init__(self, rules, previous=None):
            release.wait(HELD_AT_MOST)
            super().__init__(rules, previous=previous)

    monkeypatch.setattr(resolver, "Scanner", HeldScanner)
    (rules / "beta.rule.yaml").write_text(track_rule("beta", "BETA"))
    try:
        during = resolve("during")
        # The previous rules answered: the new version's scanner is still being built,
        # and the verdict says so, so the user knows to try again rather than write the rule anew.
        assert (during.status, during.rule) == (Status.UNMATCHED, None)
        assert during.reason.endswith("; rules are reloading, try again in a few seconds)")
        assert during.to_dict()["rules_loading"] is True
    finally:
        release.set()

    wait_until(lambda: runtime.knowledge().book.get("beta"), what="the new rules to be served")
    after = resolve("after")
    assert (after.status, after.rule) == (Status.TRACKED, "beta")
    quiet = runtime.service.resolve(
        SubmitRequest.from_wire({"failure_id": "quiet", "facts": {"stderr": "x\nGAMMA broke\n"}}),
        "quiet",
    )
    assert quiet.reason == "no rule matched (2 checked)"  # loaded: nothing more to wait for
    runtime.index.close()


def test_a_worker_notices_a_new_rule_by_itself_and_failures_never_walk_the_directory(
    tmp_path, redis_url, redis_client, milvus_uri, collection, minilm, monkeypatch
):
    from theow_workers import runtime as runtime_mod

    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "alpha.rule.yaml").write_text(track_rule("alpha", "ALPHA"))
    runtime = worker_runtime(
        tmp_path, redis_url, milvus_uri, collection, minilm, THEOW_RULES_POLL_SECONDS="0.2"
    )
    runtime.role = "worker"

    def resolve(failure_id: str):
        return runtime.service.resolve(
            SubmitRequest.from_wire({"failure_id": failure_id, "facts": FAILURE}), failure_id
        )

    assert resolve("before").status is Status.UNMATCHED  # loads the rules, starts the watch
    walks = []
    walk = runtime_mod.directory_signature
    monkeypatch.setattr(
        runtime_mod,
        "directory_signature",
        lambda *d: walks.append(threading.get_ident()) or walk(*d),
    )
    (rules / "beta.rule.yaml").write_text(track_rule("beta", "BETA"))
    wait_until(lambda: runtime.knowledge().book.get("beta"), what="the watch to serve the new rule")
    after = resolve("after")
    assert (after.status, after.rule) == (Status.TRACKED, "beta")
    assert walks and threading.get_ident() not in walks  # only the watch's thread looked
    runtime.index.close()
