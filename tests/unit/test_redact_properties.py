"""Properties of masking, for any log Hypothesis can think of.

- a secret of any corpus format, put anywhere in any log text, never survives;
- masking a masked text changes nothing;
- a log made of ordinary build output (words, numbers, hashes, paths, versions,
  `name=value` pairs whose names say nothing secret) comes back unchanged.
"""

from __future__ import annotations

import random
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_redact import CORPUS, REDACTORS

FORMATS = CORPUS.formats()
PROPERTY_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

# Lines as CI prints them; none says anything about a secret.
LOG_LINES = [
    "2025-04-15T10:15:00.6609698Z ##[group]Run actions/checkout@v4",
    "npm ERR! code ERESOLVE",
    "error[E0433]: failed to resolve: use of undeclared crate or module `tokio`",
    "FAILED tests/test_api.py::test_login - AssertionError: assert 401 == 200",
    '  File "/usr/lib/python3.11/site-packages/pip/_internal/cli/base_command.py", line 180',
    "go: downloading golang.org/x/sys v0.15.0",
    "Step 7/12 : RUN make -j4 && make install",
    "[INFO] BUILD FAILURE",
    "make: *** [Makefile:42: all] Error 2",
    "--> 3f2a9c1d4b5e",
    'Caused by: java.lang.NullPointerException: Cannot invoke "String.length()"',
    "",
]
WORDS = st.sampled_from(
    [
        "build",
        "test",
        "error",
        "warning",
        "failed",
        "compile",
        "module",
        "package",
        "version",
        "install",
        "download",
        "linking",
        "target",
        "release",
        "debug",
        "cache",
        "layer",
        "image",
        "step",
        "job",
        "runner",
        "exit",
        "code",
        "line",
        "file",
        "found",
        "missing",
        "expected",
        "actual",
        "retry",
        "timeout",
        "network",
        "resolve",
        "dependency",
    ]
)
ORDINARY_NAMES = st.sampled_from(
    ["version", "path", "status", "user", "host", "port", "branch", "sha", "target", "os", "arch"]
)
HEX = st.text(alphabet="0123456789abcdef", min_size=7, max_size=64)
VERSION = st.tuples(*[st.integers(0, 30)] * 3).map(lambda v: "v{}.{}.{}".format(*v))
PATH = st.lists(
    st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=8), min_size=1, max_size=5
).map(lambda parts: "/" + "/".join(parts))
PAIR = st.tuples(ORDINARY_NAMES, st.sampled_from(["=", ": "]), st.one_of(WORDS, HEX, VERSION))
TOKEN = st.one_of(WORDS, HEX, VERSION, PATH, st.integers(0, 10**9).map(str), PAIR.map("".join))
ORDINARY_LINE = st.lists(TOKEN, max_size=12).map(" ".join)
ANY_LINE = st.one_of(
    st.sampled_from(LOG_LINES),
    ORDINARY_LINE,
    st.text(alphabet=string.printable.replace("\n", "").replace("\r", ""), max_size=80),
)
LOG = st.lists(ANY_LINE, max_size=15).map("\n".join)


@PROPERTY_SETTINGS
@given(
    name=st.sampled_from(sorted(FORMATS)),
    seed=st.integers(0, 2**32),
    before=LOG,
    after=LOG,
    prefix=ORDINARY_LINE,
    suffix=ORDINARY_LINE,
)
def test_a_secret_put_anywhere_in_a_log_is_always_masked(name, seed, before, after, prefix, suffix):
    line, secrets = FORMATS[name](random.Random(seed))
    log = f"{before}\n{prefix} {line} {suffix}\n{after}"
    for who, redact in REDACTORS.items():
        masked = redact(log)
        assert not [s for s in secrets if s in masked], (who, masked)


@PROPERTY_SETTINGS
@given(log=LOG, name=st.sampled_from(sorted(FORMATS)), seed=st.integers(0, 2**32))
def test_masking_twice_is_masking_once(log, name, seed):
    line, _ = FORMATS[name](random.Random(seed))
    for text in (log, f"{log}\n{line}\n{log}"):
        for redact in REDACTORS.values():
            once = redact(text)
            assert redact(once) == once


@PROPERTY_SETTINGS
@given(st.text(max_size=300))
def test_masking_any_text_twice_is_masking_it_once(text):
    for redact in REDACTORS.values():
        once = redact(text)
        assert redact(once) == once


@PROPERTY_SETTINGS
@given(st.lists(st.one_of(st.sampled_from(LOG_LINES), ORDINARY_LINE), max_size=30).map("\n".join))
def test_ordinary_build_output_comes_back_unchanged(log):
    for redact in REDACTORS.values():
        masked = redact(log)
        assert masked == log
