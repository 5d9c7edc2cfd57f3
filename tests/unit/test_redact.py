"""Secrets in a build log are masked on the agent and again on the worker; the log stays readable.

Every case runs through both redactors: the client's (stdlib only) and the
worker's (the client's detectors plus detect-secrets' plugins).
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.base import RegexBasedDetector

from theow_client import redact as client_redact
from theow_client.client import build_payload
from theow_client.redact import summary
from theow_workers.core.logs import redact as worker_redact

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_corpus() -> ModuleType:
    spec = importlib.util.spec_from_file_location("secret_corpus", BENCHMARKS / "secret_corpus.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("secret_corpus", module)
    spec.loader.exec_module(module)
    return module


CORPUS = load_corpus()
REDACTORS = {"client": client_redact.redact_text, "worker": worker_redact.redact_text}
both = pytest.mark.parametrize("who", sorted(REDACTORS))

# (what a build printed, what must be left of it): each of issue 16's leaks, and the readable rest.
MASKED = [
    ("+ ./deploy --password Xk9mQ2vR --region eu", "+ ./deploy --password *** --region eu"),
    ("+ liquibase --password=Xk9mQ2vR --url x", "+ liquibase --password=*** --url x"),
    ('{"user": "bob", "password": "Xk9mQ2vR"}', '{"user": "bob", "password": "***"}'),
    ("DB_PASS=opensesame7 ./run", "DB_PASS=*** ./run"),
    ("+ mysql -h db -uroot -phunter2 app", "+ mysql -h db -uroot -p*** app"),
    ("+ docker login -u bob -p hunter2 ghcr.io", "+ docker login -u bob -p *** ghcr.io"),
    ("+ PGPASSWORD='hunter two' psql -h db", "+ PGPASSWORD='***' psql -h db"),
    (
        "> Authorization: token 0123456789abcdef0123456789abcdef01234567",
        "> Authorization: token ***",
    ),
    ("> Authorization: Bearer abc.def.ghi123", "> Authorization: Bearer ***"),
    ("> Authorization: Basic Ym9iOmh1bnRlcjI=", "> Authorization: Basic ***"),
    ("//registry.npmjs.org/:_authToken=npm_" + "a1B2c3D4e5" * 3 + "a1B2c3", None),
    ("GITHUB_TOKEN=ghp_" + "a1B2" * 9, "GITHUB_TOKEN=[masked:github-token]"),
    ("token github_pat_" + "a1B2c3D4e5F6" * 7, "token [masked:github-token]"),
    ("key AKIAIOSFODNN7ABCDEFG", "key [masked:aws-access-key]"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEK3Y", None),
    (
        "POST https://hooks.slack.com/services/T0ABCDEFG/B0ABCDEFG/abcdefghijklmnopqrstuvwx",
        "POST https://hooks.slack.com/[masked:slack-webhook]",
    ),
    (
        "https://discord.com/api/webhooks/123456789012345678/" + "aB3_-" * 12,
        "https://discord.com/api/webhooks/[masked:discord-webhook]",
    ),
    (
        "https://contoso.webhook.office.com/webhookb2/abc@def/IncomingWebhook/123/456",
        "https://contoso.webhook.office.com/[masked:teams-webhook]",
    ),
    (
        "+ git clone https://bob:s3cr3t@git.example/x.git",
        "+ git clone https://bob:***@git.example/x.git",
    ),
    ("redis://:s3cr3t@cache:6379/0", "redis://:***@cache:6379/0"),
    ("postgresql://app:Mw@Fs1+Eq!T3@db:5432/app", "postgresql://app:***@db:5432/app"),
]
SLACK_HOOK = "POST https://hooks.slack.com/services/T0ABCDEFG/B0ABCDEFG/abcdefghijklmnopqrstuvwx"
# detect-secrets' Slack plugin takes the whole URL: the worker's mask is wider.
WORKER_EXPECTED = {SLACK_HOOK: "POST [masked:slack-token]"}
UNCHANGED = [
    "PASS: test_foo (0.01s)",
    "PWD=/home/runner/work",
    "error: unexpected token: invalid",
    "max_tokens=4096",
    "Basic Authentication failed for user bob",
    "+ mkdir -p build/out",
    "+ docker run -p 8080:80 nginx",
    "+ ssh -p 22 deploy@host",
    "+ docker login --password-stdin -u bob ghcr.io",
    "+ gcloud secrets versions access 2 --secret=engflow-mesolite-key",
    "+ bazel build //x --tls_client_key=/home/agent/engflow.key",
    "test settings::non_separator_tokens::update_unexisting_index ... ok",
    "test auth::authorization::raise_error_non_authorized_index_patterns ... ok",
    "Number of tries to enter a password: 3",
    "  server-password: GITHUB_TOKEN",
    "authorization: 'token [REDACTED]'",
    "commit 3f2a9c1d4b5e6f708192a3b4c5d6e7f8091a2b3c",
    "sha256:0d1f2e3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0",
    "https://github.com/org/repo/actions/runs/123456789",
]


@both
@pytest.mark.parametrize(("log", "expected"), MASKED)
def test_each_leak_of_issue_16_is_masked_and_keeps_its_name(who, log, expected):
    masked = REDACTORS[who](log)
    if who == "worker" and log in WORKER_EXPECTED:
        expected = WORKER_EXPECTED[log]
    if expected is not None:
        assert masked == expected
    secret = log.rsplit("=", 1)[-1].split()[-1] if expected is None else None
    if secret:
        assert secret not in masked


@both
@pytest.mark.parametrize("log", UNCHANGED)
def test_ordinary_log_lines_are_left_alone(who, log):
    assert REDACTORS[who](log) == log


@both
def test_a_private_key_body_is_masked_whole_between_readable_begin_and_end_lines(who):
    body = ["MIIEpAIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw"] * 3
    block = "\n".join(["-----BEGIN RSA PRIVATE KEY-----", *body, "-----END RSA PRIVATE KEY-----"])
    masked = REDACTORS[who](f"step 3\n{block}\nstep 4")
    assert masked == (
        "step 3\n-----BEGIN RSA PRIVATE KEY-----\n[masked:private-key]\n"
        "-----END RSA PRIVATE KEY-----\nstep 4"
    )
    # Cut by the 64 KB bound: no END line, or no BEGIN line.
    assert body[0] not in REDACTORS[who]("-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(body))
    cut = "[... theow: 9 characters omitted ...]\n" + "\n".join(body)
    assert body[0] not in REDACTORS[who](cut + "\n-----END RSA PRIVATE KEY-----\nnext step")


@both
@pytest.mark.parametrize("name", sorted(CORPUS.formats()))
def test_every_format_of_the_benchmark_corpus_is_masked(who, name):
    line, secrets = CORPUS.formats()[name](random.Random(name))
    masked = REDACTORS[who](f"before\n{line}\nafter")
    assert not [s for s in secrets if s in masked], masked
    assert masked.startswith("before\n") and masked.endswith("\nafter")


def test_facts_named_like_secrets_are_masked_whole_and_nested_text_is_masked():
    facts = {
        "stderr": "export GITHUB_TOKEN=ghp_" + "a1B2" * 9,
        "api_key": "anything at all",
        "env": {"DB_PASSWORD": "x", "steps": ["ok", "--password hunter2"]},
        "exit_code": 2,
        "note ghp_" + "z9Y8" * 9: "a secret pasted as a fact's name",
    }
    for redact in (client_redact.redact, worker_redact.redact):
        assert redact(facts) == {
            "stderr": "export GITHUB_TOKEN=[masked:github-token]",
            "api_key": "***",
            "env": {"DB_PASSWORD": "***", "steps": ["ok", "--password ***"]},
            "exit_code": 2,
            "note [masked:github-token]": "a secret pasted as a fact's name",
        }


def test_the_payload_a_client_builds_holds_no_secret():
    payload = build_payload(
        {"stderr": "+ mysql -uroot -pHunter2x app\nERROR 1045", "job": "db"}, failure_id="f-1"
    )
    assert json.loads(payload["facts_json"])["stderr"] == "+ mysql -uroot -p*** app\nERROR 1045"
    assert "Hunter2x" not in json.dumps(payload)


def test_the_worker_runs_every_regex_plugin_detect_secrets_ships_but_the_skipped_ones():
    plugins = {
        cls.__name__
        for cls in get_mapping_from_secret_type_to_class().values()
        if issubclass(cls, RegexBasedDetector)
    }
    used = plugins - worker_redact.SKIPPED_PLUGINS
    assert len(used) >= 20
    # A plugin a later release adds runs on every line until it is given keywords here.
    assert used <= set(worker_redact.PLUGIN_KEYWORDS), used - set(worker_redact.PLUGIN_KEYWORDS)
    labels = {d.label for d in worker_redact.plugin_detectors()}
    assert {"github-token", "slack-token", "softlayer-credentials", "json-web-token"} <= labels
    worker = worker_redact.redactor()
    assert len(worker.detectors) == len(client_redact.default_redactor().detectors) + len(
        worker_redact.plugin_detectors()
    )


def test_the_hyperscan_keyword_finder_agrees_with_the_plain_one():
    keywords = frozenset(worker_redact.redactor().keywords)
    text = "x ghp_ y AKIA z :aa -us cloudant_key softlayer-api the://end".lower()
    plain = {k for k in keywords if k in text}
    assert worker_redact.hyperscan_finder(keywords)(text) == plain
    assert {"ghp_", "akia", "://", "cloudant_key"} <= plain


def test_a_task_summary_names_the_failure_and_sizes_never_the_facts():
    payload = build_payload(
        {"stderr": "x" * 300 + " s3cr3t-value", "problem_type": "oom", "exit_code": 137},
        failure_id="f-9",
    )
    text = summary([payload])
    assert (
        text
        == "failure f-9 problem_type=oom facts={'stderr': 313, 'problem_type': 3, 'exit_code': 3}"
    )
    assert summary([{"job_id": "j-1", "items": [{"facts": {"stderr": "s3cr3t"}}] * 25}]) == (
        "replay job j-1 items=25"
    )


@both
@pytest.mark.parametrize(
    ("log", "shortened"),
    [
        ("E       assert 'ghp_a1B2a1B2...2a1B2a1B2a1B2' == ''", "ghp_a1B2a1B2...2a1B2a1B2a1B2"),
        ("token was glpat-xY12zW34\u2026Qr56", "glpat-xY12zW34\u2026Qr56"),
        (
            "    AssertionError: 'sk-proj-Ab12Cd34...Ef56Gh78' != None",
            "sk-proj-Ab12Cd34...Ef56Gh78",
        ),
    ],
)
def test_a_token_a_test_runner_shortened_for_display_is_masked_both_ends(who, log, shortened):
    masked = REDACTORS[who](log)
    assert masked == log.replace(shortened, "[masked:truncated-token]")


@both
@pytest.mark.parametrize("log", ["the task-list... done", "sk-... nothing here", "see ghp_ab..."])
def test_an_ellipsis_after_a_short_word_is_not_a_token(who, log):
    assert REDACTORS[who](log) == log
