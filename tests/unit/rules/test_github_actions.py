"""The shipped rules for messages GitHub's own actions, libraries and CLI print.

An action's failure arrives as an annotation (``##[error]…``) after the
runner's time stamp; the message is the same in every repository that uses
the action. Each case goes through the path a worker takes (stamps removed,
the annotation read as its message): the rule chosen, what it captured and
the line a person is shown.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from theow_workers import evaluation
from theow_workers.core.resolve.library import Library
from theow_workers.core.resolve.plan import Hints, RuleBook, plan

ROOT = Path(__file__).resolve().parents[3]
TS = "2025-04-15T08:30:13.2502781Z "


@pytest.fixture(scope="module")
def book() -> RuleBook:
    return Library.load(ROOT / "rules", ROOT / "actions").book


def gha(*lines: str) -> str:
    return "".join(f"{TS}{line}\n" for line in lines)


def decided(book: RuleBook, log: str) -> evaluation.Outcome:
    outcome, _ = evaluation.decide(book, {"log": log}, "f1")
    return outcome


def captures(book: RuleBook, log: str) -> dict[str, str]:
    match = plan(book, {"log": log}, Hints()).attempts[0].match
    assert match is not None
    return {k: v for k, v in match.captures.named.items() if v is not None}


def test_a_failed_dependabot_update_is_named_on_the_action_s_message(book):
    log = gha(
        "##[group]Run github/dependabot-action@main",
        "updater | 2025/04/14 09:17:27 ERROR <job_997900193> Error during file fetching; aborting",
        "Failure running container 1e9814bff6a7e28e5293a44035b1c6f56e732084eb5e6fba728820aacad75419",
        "##[error]Dependabot encountered an error performing the update",
    ) + (
        "Error: The updater encountered one or more errors.\n"
        "For more information see: https://github.com/acme/app/network/updates/1 (write access)\n"
    )
    log += gha("🤖 ~ finished: error reported to Dependabot ~")
    outcome = decided(book, log)
    assert (outcome.rule, outcome.mode) == ("dependabot_update_failed", "track")
    assert outcome.evidence is not None
    assert outcome.evidence["text"].endswith(
        "Dependabot encountered an error performing the update"
    )


def test_a_required_input_an_action_did_not_get_names_the_input(book):
    log = gha(
        "##[group]Run some/notify-action@v2",
        "with:",
        "  PAYLOAD_FILENAME: message.json",
        "##[endgroup]",
        "##[error]Input required and not supplied: WEBHOOK_URL",
    )
    outcome = decided(book, log)
    assert outcome.rule == "github_action_input_missing"
    assert captures(book, log)["input"] == "WEBHOOK_URL"
    assert outcome.where[0].text.endswith("Input required and not supplied: WEBHOOK_URL")


def test_github_script_s_unhandled_error_names_what_the_script_threw(book):
    log = gha(
        "##[group]Run actions/github-script@v7",
        "RequestError [HttpError]: Not Found",
        "    at /home/runner/work/_actions/actions/github-script/v7/dist/index.js:9537:21",
        "  status: 404,",
        "}",
        "##[error]Unhandled error: HttpError: Not Found",
    )
    assert decided(book, log).rule == "github_script_unhandled_error"
    found = captures(book, log)
    assert (found["type"], found["message"]) == ("HttpError", "Not Found")


def test_the_github_cli_without_a_token_is_named_not_its_exit_code(book):
    log = gha(
        "gh: To use GitHub CLI in a GitHub Actions workflow, set the GH_TOKEN environment "
        "variable. Example:",
        "  env:",
        "    GH_TOKEN: ${{ github.token }}",
        "##[error]Process completed with exit code 4.",
    )
    outcome = decided(book, log)
    assert (outcome.rule, outcome.wrapper) == ("gh_cli_token_missing", None)


def test_a_graphql_error_shows_the_api_s_first_message(book):
    log = gha("##[group]Run actions/add-to-project@v1.0.2", "##[endgroup]") + (
        f"{TS}##[error]Request failed due to following response errors:\n"
        " - Resource protected by organization SAML enforcement. You must grant your Personal "
        "Access token access to this organization.\n"
    )
    assert decided(book, log).rule == "github_graphql_request_failed"
    assert captures(book, log)["message"].startswith("Resource protected by organization SAML")


def test_eslint_without_its_config_file_is_named_before_the_steps_that_ran_after_it(book):
    log = gha(
        "> npm-run-all --aggregate-output --continue-on-error --parallel js-lint css-lint",
        "Oops! Something went wrong! :(",
        "ESLint: 9.21.0",
        "ESLint couldn't find an eslint.config.(js|mjs|cjs) file.",
        "From ESLint v9.0.0, the default configuration file is now eslint.config.js.",
        "> stylelint 'src/**/*.scss'",
        'ERROR: "js-lint" exited with 2.',
        "##[error]Process completed with exit code 1.",
    )
    outcome = decided(book, log)
    assert outcome.rule == "eslint_config_not_found"
    assert outcome.evidence is not None
    assert outcome.evidence["text"] == "ESLint couldn't find an eslint.config.(js|mjs|cjs) file."


def test_a_command_windows_does_not_know_is_a_missing_command(book):
    log = gha(
        "Running beforeBuildCommand `IS_TAURI=true yarn build:web`",
        "'IS_TAURI' is not recognized as an internal or external command,",
        "operable program or batch file.",
        "beforeBuildCommand `IS_TAURI=true yarn build:web` failed with exit code 1",
        "##[error]Process completed with exit code 2.",
    )
    assert decided(book, log).rule == "command_not_found"
    assert captures(book, log)["tool"] == "IS_TAURI"


def test_a_test_that_names_cmd_s_message_is_not_a_missing_command(book):
    log = (
        "tests/test_no_command.py::test_match[puthon-'puthon' is not recognized as an internal "
        "or external command] PASSED [ 73%]\n"
        "operable program or batch file. PASSED [ 74%]\n"
        "FAILED tests/test_readme.py::test_readme - AssertionError\n"
        "Process exited with code 1\n"
    )
    assert decided(book, log).rule != "command_not_found"
