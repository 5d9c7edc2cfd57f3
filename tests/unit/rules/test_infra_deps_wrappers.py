"""The shipped rules for dependency fetching, infrastructure and CI wrappers.

Each case is a log excerpt as the tool prints it, fed through the resolver
with the whole shipped rule library, as `theow rules eval` and a worker do:
the rule chosen, what it captured and the evidence line a person is shown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from theow_workers.core.actions import load_actions
from theow_workers.core.resolve.plan import Hints, RuleBook, plan
from theow_workers.core.rules.schema import load_rules

ROOT = Path(__file__).resolve().parents[3]
TS = "2025-04-15T08:30:13.2502781Z "


@pytest.fixture(scope="module")
def book() -> RuleBook:
    actions = load_actions(ROOT / "actions")
    ruleset = load_rules(ROOT / "rules", known_actions=frozenset(actions.names()))
    assert not ruleset.errors, "\n".join(str(e) for e in ruleset.errors)
    return RuleBook(ruleset.rules, ruleset.version)


def verdict(book: RuleBook, log: str) -> tuple[str | None, dict[str, Any], str, list[str]]:
    """(chosen rule, its named captures, its evidence line, the other rules that applied)."""
    attempts = plan(book, {"log": log}, Hints()).attempts
    if not attempts:
        return None, {}, "", []
    match = attempts[0].match
    assert match is not None and match.evidence is not None
    named = {k: v for k, v in match.captures.named.items() if v is not None}
    return attempts[0].rule, named, match.evidence.text, [c.rule for c in attempts[1:]]


def gha(*lines: str) -> str:
    return "".join(f"{TS}{line}\n" for line in lines)


# --- CI wrappers -----------------------------------------------------------------


def test_an_annotated_message_no_tool_rule_knows_leaves_the_exit_code_naming_the_step(book):
    # The annotation's message is read as the message itself (a tool's rule would explain it);
    # the runner's exit-code line keeps its mark and its wrapper.
    log = gha(
        "##[group]Run ./scripts/check-labels.sh",
        "Checking pull request labels",
        "##[error]Every PR must have at least one label starting with 'release-'.",
        "##[error]Process completed with exit code 1.",
    )
    rule, captures, evidence, _ = verdict(book, log)
    assert (rule, captures["code"]) == ("github_actions_error", "1")
    assert evidence == "##[error]Process completed with exit code 1."


def test_the_bare_exit_code_names_the_step_when_nothing_else_does(book):
    log = gha(
        "Run ./scripts/verify.sh",
        "mismatch in generated files",
        "##[error]Process completed with exit code 3.",
    )
    rule, captures, evidence, _ = verdict(book, log)
    assert (rule, captures["code"]) == ("github_actions_error", "3")
    assert evidence.endswith("##[error]Process completed with exit code 3.")


def test_a_more_telling_wrapper_beats_the_bare_exit_code(book):
    log = gha(
        "cc -O2 -c src/io.c",
        "make[1]: *** [Makefile:41: src/io.o] Error 1",
        "make: *** [Makefile:12: all] Error 2",
        "##[error]Process completed with exit code 2.",
    )
    rule, captures, evidence, also = verdict(book, log)
    assert (rule, captures["target"]) == ("make_recipe_failed", "Makefile:41: src/io.o")
    assert evidence == "make[1]: *** [Makefile:41: src/io.o] Error 1"
    assert "github_actions_error" not in also


def test_travis_own_wrapper_lines_are_not_a_cause(book):
    # "The command ... exited with 1." is true of every failed Travis job and names
    # no cause: no rule claims it, so such a failure stays unmatched (and explorable).
    log = (
        "Ran 12 tests\r\n"
        "travis_time:end:1f2e:start=1564756180,finish=1564756569,duration=389\r"
        '\x1b[0K\x1b[31;1mThe command "./ci/run-tests.sh --fast" exited with 1.\x1b[0m\r\n'
        "Done. Your build exited with 1.\r\n"
    )
    assert verdict(book, log)[0] is None


def test_on_travis_the_make_target_beats_the_command_and_the_build_summary(book):
    log = (
        "Test results:\r\nFAILED: test_popupwin\r\n"
        "make[2]: *** [report] Error 1\r\nmake[1]: *** [scripttests] Error 2\r\n"
        "travis_time:end:0a1b:start=1,finish=2,duration=1\r"
        '\x1b[0K\x1b[31;1mThe command "do_test make ${TEST}" exited with 2.\x1b[0m\r\n'
        + "travis_fold:end:test\r\n" * 200
        + "\r\nDone. Your build exited with 1.\r\n"
    )
    rule, captures, evidence, _ = verdict(book, log)
    assert (rule, captures["target"]) == ("make_recipe_failed", "report")
    assert evidence == "make[2]: *** [report] Error 1"


def test_gradle_shows_what_went_wrong(book):
    log = (
        "> Task :app:processDebugResources FAILED\n\n"
        "FAILURE: Build failed with an exception.\n\n"
        "* What went wrong:\n"
        "Execution failed for task ':app:processDebugResources'.\n"
        "> A failure occurred while executing a resource link task\n\n"
        "* Try:\n> Run with --stacktrace option to get the stack trace.\n\nBUILD FAILED in 41s\n"
    )
    rule, captures, evidence, _ = verdict(book, log)
    assert rule == "gradle_build_failed"
    assert captures["what_went_wrong"] == "Execution failed for task ':app:processDebugResources'."
    assert captures["reason"] == "A failure occurred while executing a resource link task"
    assert evidence == "Execution failed for task ':app:processDebugResources'."


def test_maven_shows_the_goal_s_message(book):
    log = (
        "[INFO] BUILD FAILURE\n"
        "[ERROR] Failed to execute goal org.apache.maven.plugins:maven-enforcer-plugin:3.4.1:enforce "
        "(enforce) on project billing: Some Enforcer rules have failed. -> [Help 1]\n"
    )
    rule, captures, _, _ = verdict(book, log)
    assert rule == "maven_goal_failed"
    assert captures["project"] == "billing"
    assert captures["message"] == "Some Enforcer rules have failed."


def test_jenkins_timestamped_lines_are_read_like_plain_ones(book):
    log = (
        "[2024-06-25T11:39:01.235Z] [ERROR] Failed to execute goal com.diffplug.spotless:spotless-maven-plugin:"
        "2.43.0:check (default) on project core: The following files had format violations:\n"
        "[2024-06-25T11:39:01.301Z] ERROR: script returned exit code 1\n"
    )
    rule, captures, evidence, also = verdict(book, log)
    assert (rule, captures["project"]) == ("maven_goal_failed", "core")
    assert evidence.startswith("[ERROR] Failed to execute goal")
    assert "jenkins_step_failed" not in also  # the weaker wrapper steps aside


def test_npm_names_the_failed_script_and_package(book):
    log = (
        "npm ERR! code ELIFECYCLE\r\nnpm ERR! errno 2\r\n"
        "npm ERR! webapp@1.4.0 build: `webpack --mode production`\r\nnpm ERR! Exit status 2\r\n"
    )
    rule, captures, evidence, _ = verdict(book, log)
    assert rule == "npm_script_failed"
    assert (captures["package"], captures["script"]) == ("webapp", "build")
    assert captures["command"] == "webpack --mode production"
    assert evidence == "npm ERR! webapp@1.4.0 build: `webpack --mode production`"
    assert captures["code"] == "2"


def test_rake_shows_why_it_aborted(book):
    log = (
        "$ bundle exec rake test\r\nrake aborted!\r\n"
        'Command failed with status (1): [ruby -w -I"lib" /usr/lib/ruby/rake_test_loader.rb]\r\n'
    )
    rule, captures, _, _ = verdict(book, log)
    assert rule == "rake_aborted"
    assert captures["message"].startswith("Command failed with status (1):")


def test_a_missing_rakefile_is_its_own_cause_not_rake_s_wrapper(book):
    log = "$ rake\r\nrake aborted!\r\nNo Rakefile found (looking for: rakefile, Rakefile)\r\n"
    rule, captures, evidence, also = verdict(book, log)
    assert (rule, captures["looked_for"]) == ("rake_rakefile_missing", "rakefile, Rakefile")
    assert evidence == "No Rakefile found (looking for: rakefile, Rakefile)"
    assert "rake_aborted" in also


@pytest.mark.parametrize(
    ("log", "rule", "captured"),
    [
        (
            "The following build commands failed:\n\tCompileSwift normal arm64 /ci/App/Feed.swift "
            "(in target 'Feed' from project 'App')\n(1 failure)\n** BUILD FAILED **\n",
            "xcodebuild_failed",
            {
                "command": "CompileSwift normal arm64 /ci/App/Feed.swift (in target 'Feed' from project 'App')"
            },
        ),
        (
            # With a compiler error in the summary, csharp_compile_error wins instead.
            "Build FAILED.\n\n    0 Warning(s)\n    0 Error(s)\n",
            "msbuild_build_failed",
            {},
        ),
        (
            "  lint: OK (4.12 seconds)\n  py312: FAIL code 1 (38.50=setup[3.10]+cmd[35.40] seconds)\n",
            "tox_env_failed",
            {"env": "py312", "code": "1"},
        ),
        (
            "INFO: Elapsed time: 41.203s\nFAILED: Build did NOT complete successfully\n",
            "bazel_build_failed",
            {},
        ),
    ],
    ids=["xcodebuild", "msbuild", "tox", "bazel"],
)
def test_a_build_tool_wrapper_names_its_failed_step_and_beats_the_ci_line(
    book, log, rule, captured
):
    chosen, captures, _, also = verdict(
        book, gha(*log.splitlines()) + gha("##[error]Process completed with exit code 1.")
    )
    assert chosen == rule
    assert {k: captures.get(k) for k in captured} == captured
    assert "github_actions_error" not in also


def test_a_specific_cause_beats_every_wrapper_in_the_same_log(book):
    log = (
        "Your requirements could not be resolved to an installable set of packages.\n\n"
        "  Problem 1\n"
        "    - Root composer.json requires php ^8.2 but your php version (8.1.27) does not satisfy that requirement.\n"
        '\x1b[31;1mThe command "composer install" failed and exited with 2 during install.\x1b[0m\n'
        "Done. Your build exited with 1.\n"
    )
    rule, captures, evidence, _ = verdict(book, log)
    assert rule == "composer_requirements_unresolvable"
    assert captures["problem"].startswith("Root composer.json requires php ^8.2")
    assert evidence == "Your requirements could not be resolved to an installable set of packages."


def test_gradle_s_failing_test_line_beats_its_there_were_failing_tests_wrapper(book):
    log = (
        "> Task :service:test\n\n"
        "InvoiceServiceTest > roundsHalfEven() FAILED\n"
        "    org.opentest4j.AssertionFailedError at InvoiceServiceTest.java:88\n\n"
        "> Task :service:test FAILED\n\n"
        "FAILURE: Build failed with an exception.\n\n* What went wrong:\n"
        "Execution failed for task ':service:test'.\n"
        "> There were failing tests. See the report at: file:///ci/build/reports/tests/test/index.html\n"
    )
    rule, captures, evidence, also = verdict(book, log)
    assert rule == "java_test_failures"
    assert captures["test"] == "InvoiceServiceTest > roundsHalfEven()"
    assert evidence == "InvoiceServiceTest > roundsHalfEven() FAILED"
    assert "gradle_build_failed" in also


# --- infrastructure: only the line that failed the step --------------------------


def test_a_probe_for_a_missing_tool_that_the_script_survives_is_not_a_failure(book):
    log = gha(
        "./ci/report-size.sh: line 9: bc: command not found",
        "bundle size: 1.2 MB",
        "##[group]Run actions/upload-artifact@v4",
    )
    assert verdict(book, log)[0] is None


def test_a_missing_tool_that_fails_the_step_is_named(book):
    log = gha(
        "+ ./scripts/release-notes.sh v2.4.0",
        "./scripts/release-notes.sh: line 14: jq: command not found",
    )
    log += gha("##[error]Process completed with exit code 127.")
    rule, captures, evidence, _ = verdict(book, log)
    assert (rule, captures["tool"]) == ("command_not_found", "jq")
    assert evidence == "./scripts/release-notes.sh: line 14: jq: command not found"


def test_a_proxy_warning_about_a_reset_connection_is_not_a_network_failure(book):
    log = gha(
        "proxy | 2025/04/14 09:14:34 [028] WARN: Cannot write TLS response body from mitm'd client: "
        "write tcp 172.19.0.2:1080->172.19.0.3:55206: write: connection reset by peer",
        "updater | Finished job successfully",
    )
    assert verdict(book, log)[0] is None


def test_a_download_cut_by_a_reset_is_retried(book):
    log = (
        'go: example.com/lib@v1.9.1: Get "https://proxy.golang.org/example.com/lib/@v/v1.9.1.zip": '
        "read tcp 10.1.4.17:51234->142.250.74.113:443: read: connection reset by peer\n"
    )
    rule, _, _, _ = verdict(book, log)
    assert rule == "network_flake"
    assert book.get("network_flake").mode.value == "retry"


def test_github_s_low_disk_warning_is_not_a_full_disk(book):
    log = gha(
        "##[warning]You are running out of disk space. The runner will stop working when the machine "
        "runs out of disk space. Free space left: 94 MB",
        "Cleaning up orphan processes",
    )
    assert verdict(book, log)[0] is None


def test_travis_s_no_output_kill_is_a_time_limit_not_the_command(book):
    log = (
        "Running 1,204 examples\r\n"
        "\x1b[31;1mNo output has been received in the last 10m0s, this potentially indicates a stalled "
        "build or something wrong with the build itself.\x1b[0m\r\n"
        "\x1b[31;1mThe build has been terminated\x1b[0m\r\n"
    )
    rule, captures, _, _ = verdict(book, log)
    assert (rule, captures["limit"]) == ("ci_job_timeout", "10m0s")


def test_a_killed_build_that_ends_with_137_is_an_oom_kill(book):
    log = gha("+ cargo build --release", "   Compiling heavy-crate v0.4.0", "Killed")
    log += gha("##[error]Process completed with exit code 137.")
    rule, _, evidence, also = verdict(book, log)
    assert rule == "oom_killed"
    assert evidence == "Killed"
    assert "github_actions_error" in also


def test_an_eol_apt_release_is_named_and_its_warning_twin_is_not(book):
    log = (
        "Err:5 http://deb.debian.org/debian buster Release\n  404  Not Found [IP: 151.101.2.132 80]\n"
        "E: The repository 'http://deb.debian.org/debian buster Release' does not have a Release file.\n"
    )
    rule, captures, _, _ = verdict(book, log)
    assert rule == "apt_repository_unusable"
    assert captures["repository"] == "http://deb.debian.org/debian buster Release"
    warned = "W: The repository 'http://ppa.launchpad.net/x/ppa/ubuntu jammy Release' does not have a Release file.\n"
    assert verdict(book, warned)[0] is None


def test_github_s_api_rate_limit_is_retried_only_when_it_failed_the_step(book):
    failed = gha(
        "##[error]API rate limit exceeded for 20.55.14.172. (But here's the good news: ...)"
    )
    rule, captures, _, _ = verdict(book, failed)
    assert (rule, captures["who"]) == ("github_api_rate_limited", "20.55.14.172")
    assert book.get(rule).mode.value == "retry"
    warned = gha(
        "Warning: API rate limit exceeded for 20.55.14.172, falling back to the cached version"
    )
    assert verdict(book, warned)[0] is None


# --- dependency resolution and fetching -------------------------------------------


def test_leiningen_shows_the_artifact_that_stopped_the_build_not_one_it_got_past(book):
    log = (
        "Could not find artifact org.example:core:jar:2.7.2-SNAPSHOT in clojars (https://clojars.org/repo/)\r\n"
        "This could be due to a typo in :dependencies or network issues.\r\n"
        "$ lein test\r\n"
        "Could not find artifact reply:reply:jar:0.4.3 in central (https://repo1.maven.org/maven2/)\r\n"
        "This could be due to a typo in :dependencies, file system permissions, or network issues.\r\n"
    )
    rule, captures, _, _ = verdict(book, log)
    assert rule == "leiningen_dependency_not_found"
    assert (captures["artifact"], captures["repository"]) == ("reply:reply:jar:0.4.3", "central")


@pytest.mark.parametrize(
    ("log", "rule", "captured"),
    [
        (
            '[!] CocoaPods could not find compatible versions for pod "Alamofire":\n  In Podfile:\n',
            "cocoapods_incompatible_versions",
            {"pod": "Alamofire"},
        ),
        (
            "Fetching gem metadata from https://rubygems.org/.\n"
            "Could not find gem 'rails (~> 8.1.0)' in rubygems repository https://rubygems.org/ or installed locally.\n",
            "bundler_gem_not_found",
            {"gem": "rails (~> 8.1.0)"},
        ),
        (
            "    Updating crates.io index\nerror: no matching package named `serde_jsonn` found\n",
            "cargo_dependency_unresolved",
            {"crate": "serde_jsonn"},
        ),
        (
            "/src/Api/Api.csproj : error NU1101: Unable to find package Acme.Telemetry. No packages exist "
            "with this id in source(s): nuget.org\n",
            "nuget_package_not_found",
            {"code": "NU1101", "package": "Acme.Telemetry"},
        ),
        (
            "npm ERR! code ETARGET\nnpm ERR! notarget No matching version found for @acme/ui-kit@^9.4.0.\n",
            "npm_no_matching_version",
            {"package": "@acme/ui-kit", "range": "^9.4.0"},
        ),
        (
            "ERROR: Could not find a version that satisfies the requirement acme-sdk==2.3.1 (from versions: none)\n"
            "ERROR: No matching distribution found for acme-sdk==2.3.1\n",
            "pip_no_distribution_for_requirement",
            {"requirement": "acme-sdk==2.3.1"},
        ),
        (
            "Error in library(testthat) : there is no package called \u2018testthat\u2019\nExecution halted\n",
            "r_package_unavailable",
            {"package": "testthat"},
        ),
        (
            "./bin/server: error while loading shared libraries: libssl.so.1.1: cannot open shared object "
            "file: No such file or directory\n",
            "linux_shared_library_missing",
            {"library": "libssl.so.1.1"},
        ),
        (
            "[FATAL] Non-resolvable parent POM for com.acme:orders:1.4.0: Could not find artifact "
            "com.acme:platform-parent:pom:7.2.0 in central (https://repo.maven.apache.org/maven2)\n",
            "maven_parent_pom_unresolvable",
            {"project": "com.acme:orders:1.4.0", "parent": "com.acme:platform-parent:pom:7.2.0"},
        ),
        (
            TS
            + "##[error]The version '3.6' with architecture 'x64' was not found for Ubuntu 24.04.\n",
            "github_setup_version_unavailable",
            {"version": "3.6", "arch": "x64", "os": "Ubuntu 24.04"},
        ),
        (
            TS
            + "##[error]Unable to resolve action `acme/deploy-action@v9`, unable to find version `v9`\n",
            "github_action_unresolvable",
            {"action": "acme/deploy-action@v9"},
        ),
        (
            'error Couldn\'t find package "@acme/eslint-config@^3.1.0" required by "web@1.0.0" on the "npm" registry.\n',
            "npm_package_not_found",
            {"package": "@acme/eslint-config"},
        ),
        (
            "Gem::Ext::BuildError: ERROR: Failed to build gem native extension.\n"
            "An error occurred while installing pg (1.5.6), and Bundler cannot continue.\n",
            "bundler_gem_install_failed",
            {"gem": "pg", "version": "1.5.6"},
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and "\n" not in v and len(v) < 40 else "",
)
def test_a_dependency_failure_names_what_could_not_be_had(book, log, rule, captured):
    chosen, captures, evidence, _ = verdict(book, log)
    assert chosen == rule
    assert {k: captures.get(k) for k in captured} == captured
    assert evidence in log


def test_pip_s_versions_none_when_the_index_was_unreachable_is_the_network_s_fault(book):
    log = (
        "WARNING: Retrying (Retry(total=0...)) after connection broken by 'NewConnectionError(...)': /simple/acme-sdk/\n"
        "Could not fetch URL https://pypi.org/simple/acme-sdk/: There was a problem confirming the ssl certificate: "
        "HTTPSConnectionPool(host='pypi.org', port=443): Max retries exceeded (Caused by SSLError("
        "SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
        "self-signed certificate in certificate chain (_ssl.c:1006)'))) - skipping\n"
        "ERROR: Could not find a version that satisfies the requirement acme-sdk==2.3.1 (from versions: none)\n"
    )
    rule, _, _, also = verdict(book, log)
    assert rule == "tls_certificate_untrusted"
    assert "pip_no_distribution_for_requirement" not in also
