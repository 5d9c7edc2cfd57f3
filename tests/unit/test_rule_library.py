"""The shipped rule library: what it covers, how it is written, how it behaves.

Given the rules in rules/ and the actions in actions/, I expect every rule to
load, to explain itself, to recognise its failure as different tools print it
(and bind its parameters from the log), to hand its actions parameters they
accept, and to cost little on a 64 KB log.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import regex

import theow_workers.rule_trial as trial_module
from theow_workers.adapters.memory import HashingEmbedder
from theow_workers.core.actions import call_action
from theow_workers.core.resolve.library import Library
from theow_workers.core.rules.matching import evaluate, required_literal
from theow_workers.core.rules.schema import REGEX_FLAGS, Mode, Rule
from theow_workers.rule_trial import trial

ROOT = Path(__file__).resolve().parents[2]
RULES, ACTIONS = ROOT / "rules", ROOT / "actions"
SUCCESS_LOGS = ROOT / "tests" / "fixtures" / "success_logs"

# The causes the library must know, by ecosystem: cause → the rule that knows it.
REQUIRED_CAUSES = {
    "go: module path rename": "go_module_path_rename",
    "go: go version mismatch": "go_toolchain_too_old",
    "go: go version unsupported by an old toolchain": "go_version_unsupported",
    "go: missing go.sum entry": "go_sum_missing_entry",
    "go: checksum mismatch": "go_checksum_mismatch",
    "go: vet failure": "go_vet_failed",
    "go: lint failure": "go_lint_failed",
    "python: module not found": "python_module_not_found",
    "python: pip resolution conflict": "pip_resolution_impossible",
    "python: poetry/uv resolution conflict": "python_solver_conflict",
    "python: pinned version does not exist": "pip_no_matching_distribution",
    "python: wheel build, missing header": "c_missing_header",
    "python: wheel build, missing compiler": "c_compiler_not_found",
    "python: wheel build, missing native library": "python_build_library_missing",
    "python: pytest collection error": "pytest_collection_error",
    "python: interpreter too old for a pin": "python_version_unsupported",
    "node: npm ERESOLVE": "npm_eresolve_peer_conflict",
    "node: missing peer dependencies": "pnpm_missing_peer_dependencies",
    "node: lockfile out of sync": "node_lockfile_out_of_sync",
    "node: engine mismatch": "node_engine_unsupported",
    "node: heap out of memory": "node_heap_out_of_memory",
    "rust: unresolved import": "rust_unresolved_import",
    "rust: MSRV mismatch": "rust_msrv_too_old",
    "rust: edition mismatch": "rust_edition_unsupported",
    "rust: linker not found": "rust_linker_not_found",
    "java: maven dependency resolution": "maven_dependency_not_found",
    "java: gradle dependency resolution": "gradle_dependency_not_found",
    "java: gradle daemon killed": "gradle_daemon_disappeared",
    "java: gradle out of memory": "gradle_out_of_memory",
    "java: symbol not found": "jvm_symbol_not_found",
    "java: test failures": "java_test_failures",
    "c/c++: missing header": "c_missing_header",
    "c/c++: undefined reference": "c_undefined_reference",
    "c/c++: compiler not found": "c_compiler_not_found",
    "containers: pull rate limit": "container_pull_rate_limit",
    "containers: manifest unknown": "container_image_not_found",
    "containers: no space left on device": "disk_no_space_left",
    "infrastructure: DNS failure": "dns_resolution_failed",
    "infrastructure: TLS handshake timeout": "tls_handshake_timeout",
    "infrastructure: connection reset": "network_flake",
    "infrastructure: registry 5xx/429": "registry_unavailable",
    "infrastructure: OOM-killed": "oom_killed",
    "infrastructure: runner lost": "runner_lost",
}
TRANSIENT = {
    "dns_resolution_failed",
    "tls_handshake_timeout",
    "network_flake",
    "registry_unavailable",
    "oom_killed",
    "runner_lost",
    "gradle_daemon_disappeared",
    "docker_daemon_unreachable",
}

# Failures as other tools and setups print them, beyond each rule's own
# examples: another package manager or compiler, a docker build that prefixes
# every line with its step. Each must match its rule, and only its rule.
VARIANTS: dict[str, list[str]] = {
    "go_module_path_rename": [
        "#9 [builder 4/6] RUN go mod download\n"
        "#9 1.204 go: github.com/codegangsta/cli@v1.22.14: parsing go.mod:\n"
        "#9 1.204 \tmodule declares its path as: github.com/urfave/cli\n"
        "#9 1.204 \t        but was required as: github.com/codegangsta/cli\n"
        '#9 ERROR: process "/bin/sh -c go mod download" did not complete successfully: exit code: 1',
    ],
    "go_toolchain_too_old": [
        "go: golang.org/x/tools@v0.27.0 requires go >= 1.22.0 (running go 1.21.13; GOTOOLCHAIN=local)",
    ],
    "go_version_unsupported": [
        "go: errors parsing go.mod:\n/src/go.mod:3: invalid go version '1.21.0': must match format 1.23",
    ],
    "go_sum_missing_entry": [
        "#11 0.912 main.go:7:2: missing go.sum entry for module providing package "
        "github.com/spf13/cobra (imported by github.com/acme/cli); to add:\n"
        "#11 0.912 \tgo get github.com/acme/cli",
    ],
    "go_mod_tidy_needed": [
        "#8 0.311 go: updates to go.mod needed; to update it:\n#8 0.311 \tgo mod tidy",
    ],
    "go_private_module": [
        "go: git.corp.example/platform/auth@v1.2.0: invalid version: git ls-remote -q origin in "
        "/home/runner/go/pkg/mod/cache/vcs/4b1c: exit status 128:\n"
        "\tremote: Repository not found.\n"
        "\tfatal: repository 'https://git.corp.example/platform/auth/' not found",
    ],
    "go_lint_failed": [
        "pkg/api/server.go:88:2: Error return value of `srv.Shutdown` is not checked (errcheck)\n"
        "pkg/api/server.go:101:9: S1002: should omit comparison to bool constant (gosimple)",
    ],
    "python_module_not_found": [
        '  File "/app/worker.py", line 1, in <module>\n    import redis.asyncio\n'
        "ModuleNotFoundError: No module named 'redis.asyncio'",
    ],
    "pip_resolution_impossible": [
        "ERROR: Cannot install fastapi==0.111.0 and starlette==0.27.0 because these package "
        "versions have conflicting dependencies.\n\nThe conflict is caused by:\n"
        "    The user requested starlette==0.27.0\n"
        "    fastapi 0.111.0 depends on starlette<0.38.0 and >=0.37.2\n\n"
        "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/"
        "dependency-resolution/#dealing-with-dependency-conflicts",
    ],
    "python_solver_conflict": [
        "  \u00d7 No solution found when resolving dependencies for split (python_full_version >= '3.12'):\n"
        "  ╰─▶ Because torch==2.3.1 depends on numpy<2 and your project depends on numpy>=2.0, "
        "we can conclude that your project's requirements are unsatisfiable.",
    ],
    "python_version_unsupported": [
        "ERROR: Ignored the following versions that require a different python version: "
        "1.11.0 Requires-Python >=3.9; 1.11.1 Requires-Python >=3.9\n"
        "ERROR: Could not find a version that satisfies the requirement scipy==1.11.1 "
        "(from versions: 1.9.3, 1.10.0, 1.10.1)",
    ],
    "python_lockfile_out_of_sync": [
        "pyproject.toml changed significantly since poetry.lock was last generated. "
        "Run `poetry lock` to fix the lock file.",
    ],
    "python_build_library_missing": [
        "      OSError: mysql_config not found\n      [end of output]",
        "      Could not find gdal-config. Make sure you have installed the GDAL native library "
        "and development headers.",
    ],
    "python_stale_bytecode": [
        "ImportError: bad magic number in 'conftest': b'\\x55\\r\\r\\n'",
    ],
    "pytest_fixture_not_found": [
        "E       fixture 'httpx_mock' not found\n>       available fixtures: anyio_backend, cache",
    ],
    "npm_eresolve_peer_conflict": [
        "#8 14.21 npm ERR! code ERESOLVE\n#8 14.21 npm ERR! ERESOLVE unable to resolve dependency tree\n"
        "#8 14.21 npm ERR! Could not resolve dependency:\n"
        '#8 14.21 npm ERR! peer react@"^17.0.0" from @testing-library/react@12.1.5',
    ],
    "node_heap_out_of_memory": [
        "FATAL ERROR: MarkCompactCollector: young object promotion failed Allocation failed - "
        "JavaScript heap out of memory",
    ],
    "node_lockfile_out_of_sync": [
        "npm error `npm ci` can only install packages when your package.json and "
        "package-lock.json or npm-shrinkwrap.json are in sync. Please update your lock file "
        "with `npm install` before continuing.\nnpm error Invalid: lock file's vite@5.2.0 "
        "does not satisfy vite@5.3.1",
        "npm ERR! The `npm ci` command can only install with an existing package-lock.json or\n"
        "npm ERR! npm-shrinkwrap.json with lockfileVersion >= 1.",
        " ERR_PNPM_LOCKFILE_CONFIG_MISMATCH  Cannot proceed with the frozen installation. "
        'The current "overrides" configuration doesn\'t match the value found in the lockfile',
    ],
    "node_engine_unsupported": [
        "npm ERR! notsup Unsupported engine for vite@5.2.11: wanted: "
        '{"node":"^18.0.0 || >=20.0.0"} (current: {"node":"16.20.2","npm":"8.19.4"})',
        "Node.js version v16.20.2 detected.\n"
        "The Angular CLI requires a minimum Node.js version of v18.19.",
    ],
    "npm_package_not_found": [
        "npm error code E404\nnpm error 404 Not Found - GET https://registry.npmjs.org/left-padd"
        " - Not found\nnpm error 404\nnpm error 404  'left-padd@^1.3.0' is not in this registry.",
    ],
    "node_module_not_found": [
        "Error [ERR_MODULE_NOT_FOUND]: Cannot find package 'dotenv' imported from "
        "/app/src/config.js",
        '✘ [ERROR] Could not resolve "zod"\n\n    src/schema.ts:1:18:\n'
        '      1 │ import { z } from "zod";',
    ],
    "typescript_type_errors": [
        "src/app.vue:41:12 - error TS2551: Property 'fetchUsers' does not exist on type "
        "'Store'. Did you mean 'fetchUser'?",
    ],
    "rust_msrv_too_old": [
        "#12 41.22 error: rustc 1.74.1 is not supported by the following packages:\n"
        "#12 41.22   litemap@0.7.4 requires rustc 1.81\n"
        "#12 41.22   zerofrom@0.1.5 requires rustc 1.81",
    ],
    "rust_linker_not_found": [
        "error: linker `link.exe` not found\n  |\n  = note: program not found\n\n"
        "note: the msvc targets depend on the msvc linker but `link.exe` was not found",
    ],
    "rust_system_library_missing": [
        "  Could not run `PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 pkg-config --libs --cflags openssl`\n"
        "  The pkg-config command could not be found.",
    ],
    "maven_dependency_not_found": [
        "[ERROR] Failed to execute goal on project api: Could not resolve dependencies for "
        "project com.acme:api:jar:1.0.0: Could not find artifact "
        "com.acme:acme-bom:pom:2.1.0 in nexus (https://nexus.corp.example/repository/public/)",
    ],
    "gradle_dependency_not_found": [
        "#14 62.10    > Could not find org.jetbrains.kotlinx:kotlinx-coroutines-core:1.9.9.\n"
        "#14 62.10      Searched in the following locations:\n"
        "#14 62.10        - https://repo.maven.apache.org/maven2/org/jetbrains/kotlinx/"
        "kotlinx-coroutines-core/1.9.9/kotlinx-coroutines-core-1.9.9.pom",
    ],
    "jvm_symbol_not_found": [
        "e: file:///builds/app/src/main/kotlin/Auth.kt:12:5 Unresolved reference 'jwtDecoder'.",
    ],
    "java_version_mismatch": [
        "> Cannot find a Java installation on your machine matching this tasks requirements: "
        "{languageVersion=21, vendor=any, implementation=vendor-specific} for LINUX on x86_64.",
        "error: invalid source release: 21",
    ],
    "c_missing_header": [
        "#7 12.31 src/zstd_codec.c:4:10: fatal error: zstd.h: No such file or directory",
    ],
    "c_undefined_reference": [
        "mold: error: undefined symbol: zlibVersion\n>>> referenced by gzip.c",
    ],
    "c_library_not_found": [
        "ld.lld: error: unable to find library -lprotobuf\n"
        "clang: error: linker command failed with exit code 1 (use -v to see invocation)",
    ],
    "c_compiler_not_found": [
        "meson.build:1:0: ERROR: Unknown compiler(s): [['cc'], ['gcc'], ['clang'], ['nvc'], "
        "['pgcc'], ['icc'], ['icx']]",
        "    unable to execute 'gcc': No such file or directory\n"
        "    error: command 'gcc' failed with exit status 1",
    ],
    "pkg_config_package_missing": [
        "#9 3.20 Package libffi was not found in the pkg-config search path.\n"
        "#9 3.20 Perhaps you should add the directory containing `libffi.pc'",
    ],
    "apt_package_not_found": [
        "E: Package 'python3-distutils' has no installation candidate",
    ],
    "container_image_not_found": [
        'Warning  Failed  8s  kubelet  Failed to pull image "ghcr.io/acme/worker:v9": rpc '
        'error: code = NotFound desc = failed to pull and unpack image "ghcr.io/acme/worker:v9": '
        'failed to resolve reference "ghcr.io/acme/worker:v9": ghcr.io/acme/worker:v9: not found',
    ],
    "disk_no_space_left": [
        "fatal: sha1 file '.git/objects/pack/tmp_pack_Xy12ab' write error: No space left on device",
        "System.IO.IOException: No space left on device : '/home/runner/runners/2.317.0/_diag/"
        "Worker_20240621-071240-utc.log'",
    ],
    "dns_resolution_failed": [
        "Caused by: org.apache.http.conn.HttpHostConnectException; java.net.UnknownHostException: "
        "repo.maven.apache.org: Temporary failure in name resolution",
        "error: Failed to fetch: `https://pypi.org/simple/httpx/`\n"
        "  Caused by: Request failed after 3 retries\n"
        "  Caused by: error sending request for url (https://pypi.org/simple/httpx/)\n"
        "  Caused by: client error (Connect)\n"
        "  Caused by: dns error: failed to lookup address information: Temporary failure in "
        "name resolution",
    ],
    "network_flake": [
        'error An unexpected error occurred: "https://registry.yarnpkg.com/rxjs/-/rxjs-7.8.1.tgz:'
        ' ESOCKETTIMEDOUT".',
        "> Could not resolve com.google.guava:guava:33.2.1-jre.\n"
        "   > Could not get resource 'https://repo.maven.apache.org/maven2/com/google/guava/guava/"
        "33.2.1-jre/guava-33.2.1-jre.pom'.\n"
        "      > Could not GET 'https://repo.maven.apache.org/maven2/com/google/guava/guava/"
        "33.2.1-jre/guava-33.2.1-jre.pom'.\n"
        "         > Connect to repo.maven.apache.org:443 [repo.maven.apache.org/151.101.0.215] "
        "failed: Connect timed out",
        "curl: (28) Operation timed out after 300001 milliseconds with 0 bytes received",
        "Collecting torch==2.3.1\n"
        "  Downloading torch-2.3.1-cp311-cp311-manylinux1_x86_64.whl (779.1 MB)\n"
        "ERROR: Exception:\nTraceback (most recent call last):\n"
        "pip._vendor.urllib3.exceptions.ReadTimeoutError: HTTPSConnectionPool("
        "host='files.pythonhosted.org', port=443): Read timed out.",
        "error: failed to download from `https://static.crates.io/crates/syn/2.0.66/download`\n\n"
        "Caused by:\n  [28] Timeout was reached (Operation too slow. Less than 10 bytes/sec "
        "transferred the last 30 seconds)",
    ],
    "registry_unavailable": [
        'error An unexpected error occurred: "https://registry.yarnpkg.com/react: '
        'Request failed \\"502 Bad Gateway\\"".',
        "curl: (22) The requested URL returned error: 503",
        " ERR_PNPM_FETCH_503  GET https://registry.npmjs.org/typescript: Service Unavailable - 503",
    ],
    "tls_handshake_timeout": [
        "fatal: unable to access 'https://gitlab.com/acme/ci-templates.git/': gnutls_handshake() "
        "failed: The TLS connection was non-properly terminated.",
    ],
    "tls_certificate_untrusted": [
        "npm ERR! code UNABLE_TO_GET_ISSUER_CERT_LOCALLY\n"
        "npm ERR! request to https://registry.npmjs.org/react failed, reason: unable to get "
        "local issuer certificate",
    ],
    "registry_auth_failed": [
        " ERR_PNPM_FETCH_401  GET https://npm.pkg.github.com/@acme%2Fui: Unauthorized - 401",
        "> Could not GET 'https://maven.pkg.github.com/acme/events/com/acme/events-api/1.4.0/"
        "events-api-1.4.0.pom'. Received status code 401 from server: Unauthorized",
    ],
    "oom_killed": [
        "/bin/bash: line 1:  4112 Killed                  python train.py --epochs 3",
        "Process 'Gradle Test Executor 3' finished with non-zero exit value 137",
    ],
    "runner_lost": [
        "ERROR: Job failed (system failure): aborted: terminated",
    ],
    "ci_job_timeout": [
        "Too long with no output (exceeded 10m0s): context deadline exceeded",
    ],
    # A missing command counts only when the step then failed on it.
    "command_not_found": [
        "/bin/sh: 1: vite: not found\nmake: *** [Makefile:9: build] Error 127",
        "bash: line 1: docker-compose: command not found\n##[error]Process completed with exit code 127.",
        "zsh: command not found: pnpm\nERROR: Job failed: exit code 127",
    ],
    "process_segfault": [
        "==41==ERROR: AddressSanitizer: SEGV on unknown address 0x000000000000 (pc 0x55d1c2a3 "
        "bp 0x7ffd sp 0x7ffd T0)",
    ],
    "pytest_failed_summary": [
        "==================== 3 failed, 412 passed, 7 skipped in 48.20s =====================",
    ],
    "python_test_failures": [
        "E       RecursionError: maximum recursion depth exceeded\n"
        "FAILED tests/test_tree.py::test_cyclic_accounts",
    ],
    "go_test_failures": [
        "    --- FAIL: TestParse/empty_input (0.00s)\n        parse_test.go:19: unexpected error",
    ],
    "rust_test_failures": [
        "test result: FAILED. 120 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; "
        "finished in 3.10s",
    ],
}


@pytest.fixture(scope="module")
def knowledge() -> Library:
    return Library.load(RULES, ACTIONS)


@pytest.fixture(scope="module")
def rules(knowledge) -> dict[str, Rule]:
    return {rule.name: rule for rule in knowledge.rules.rules}


def strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


def first_example(rule: Rule) -> dict[str, Any]:
    condition = next(c for c in rule.when if c.examples)
    return {condition.fact: condition.examples[0]}


# --- what the library is ------------------------------------------------------------


def test_rules_check_passes_on_at_least_60_rules(knowledge):
    assert knowledge.rules.errors == ()
    assert len(knowledge.rules.rules) >= 60


def test_every_required_cause_has_a_rule(rules):
    missing = {cause: name for cause, name in REQUIRED_CAUSES.items() if name not in rules}
    assert not missing


def test_modes_say_what_a_match_means(rules):
    assert {rule.mode for rule in rules.values()} == set(Mode)
    for name in TRANSIENT:
        assert rules[name].mode is Mode.RETRY, name
    for rule in rules.values():
        assert bool(rule.then) == (rule.mode is Mode.FIX), rule.name


def test_every_rule_explains_itself_and_shows_real_examples(rules):
    for rule in rules.values():
        assert len(" ".join(rule.description.split())) >= 80, rule.name
        assert rule.tags, rule.name
        with_examples = [c for c in rule.when if c.examples]
        assert with_examples, rule.name
        for condition in rule.when:
            if condition.regex or condition.contains:
                assert 2 <= len(condition.examples) <= 5, (rule.name, condition.fact)


def test_rules_decide_from_the_log_alone(rules):
    """Many failures arrive without problem_type or language: no rule requires them."""
    for rule in rules.values():
        assert any(c.fact in ("log", "stderr") and c.regex for c in rule.when), rule.name
        pinned = [c.fact for c in rule.when if "equals" in c.model_fields_set or c.one_of]
        assert not pinned, (rule.name, pinned)


# --- how it behaves ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "log"),
    [(name, log) for name, logs in VARIANTS.items() for log in logs],
    ids=[f"{name}-{i}" for name, logs in VARIANTS.items() for i in range(len(logs))],
)
def test_a_rule_recognises_its_failure_as_other_tools_print_it(rules, name, log):
    facts = {"log": log}
    match = evaluate(rules[name], facts)
    assert match.ok, match.reason
    assert not [s for a in match.actions for s in strings(a.params) if "{" in s]
    # Wrappers (generic) may match along: the resolver ranks this rule above them.
    others = [
        other
        for other in rules
        if other != name and not rules[other].generic and evaluate(rules[other], facts).ok
    ]
    assert others == []


def test_rules_test_picks_each_rule_for_its_first_example(knowledge, rules, monkeypatch):
    # trial() loads the library on every call; loading it once keeps the test fast.
    monkeypatch.setattr(
        trial_module, "Library", SimpleNamespace(load=lambda rules_dir, actions_dir: knowledge)
    )
    embedder = HashingEmbedder()
    wrong = {}
    for name, rule in rules.items():
        report = trial(first_example(rule), RULES, ACTIONS, embedder=embedder)
        unbound = [s for a in report["actions"] for s in strings(a["params"]) if "{" in s]
        # A wrapper's own example is unexplained: the wrapper is named, no rule is.
        named = report["wrapper"] if rule.generic else report["rule"]
        if report["matched"] == rule.generic or named != name or unbound:
            wrong[name] = (report["rule"], unbound)
    assert not wrong


def test_worker_side_actions_accept_what_the_rules_bind(knowledge, rules):
    """Every example's bound params are valid input for the rule's worker-side actions."""
    refused = []
    for rule in rules.values():
        for condition in rule.when:
            for example in condition.examples:
                facts = {condition.fact: example}
                for bound in evaluate(rule, facts).actions:
                    spec = knowledge.actions.get(bound.action)
                    if spec.client_side:
                        continue  # run against a workspace in tests/unit/test_actions_*.py
                    output = call_action(spec, bound.params, facts=facts)
                    if not isinstance(output, dict) or output.get("status") != "ok":
                        refused.append((rule.name, bound.action, bound.params, output))
    assert not refused


# --- what it costs -----------------------------------------------------------------

SIZE = 64 * 1024
# Far past THEOW_REGEX_TIMEOUT's 50 ms: a scan that needs it is catastrophic backtracking,
# which on 64 KB runs for years. How many ms each pattern takes is benchmarks/regex_cost.py's.
NEVER_ENDS = 10.0


def fill(text: str, size: int = SIZE) -> str:
    return (text * (size // max(1, len(text)) + 1))[:size]


def test_every_regex_answers_on_64_kb_logs_instead_of_backtracking_without_end(rules):
    logs = [
        fill("".join(p.read_text() for p in sorted(SUCCESS_LOGS.glob("*.log")))),
        fill("".join(json.loads(ln)["stderr"] for ln in (ROOT / "examples/failures.jsonl").open())),
    ]
    endless = []
    for rule in rules.values():
        examples = fill("\n".join(e for c in rule.when for e in c.examples) + "\n")
        for condition in rule.when:
            for source in filter(None, (condition.regex, condition.not_regex)):
                pattern = regex.compile(source, REGEX_FLAGS)  # as rules are searched
                literal = required_literal(source) or ""
                # Adversarial: one 64 KB line of a repeated character, the rule's literal last.
                hostile = [fill(ch, SIZE - len(literal)) + literal for ch in "a e-/0.[\n"]
                for text in [*logs, examples, *hostile]:
                    try:
                        pattern.search(text, timeout=NEVER_ENDS)
                    except TimeoutError:
                        endless.append(f"{rule.name}: {source!r} on {text[:20]!r}...")
                        break
    assert not endless
