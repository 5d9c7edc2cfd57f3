"""Which line of the checkout a CI annotation points at, and which CI's forms are chosen."""

from __future__ import annotations

from pathlib import Path

import pytest

from theow_client.ci_output import CI, MAX_DONE_LINES, MAX_LINE_CHARS, ci_of, markdown, source_of
from theow_client.verdict import Status, Verdict, Where


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    for name in ("src/foo.c", "app/models.py", "src/main.rs", "Foo.java"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("\n")
    (tmp_path / "outside.c").write_text("\n")
    return root


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("src/foo.c:12:3: error: 'x' undeclared", ("src/foo.c", 12, 3)),
        ('  File "app/models.py", line 4, in <module>', ("app/models.py", 4, None)),
        ("   --> src/main.rs:4:5", ("src/main.rs", 4, 5)),
        ("\tat com.example.Foo.run(Foo.java:41)", ("Foo.java", 41, None)),
        ("./src/foo.c:7: warning", ("src/foo.c", 7, None)),
    ],
)
def test_a_line_naming_a_file_of_the_checkout_points_at_it(
    checkout: Path, text: str, expected: tuple[str, int, int | None]
) -> None:
    assert source_of(text, checkout) == expected


def test_an_absolute_path_inside_the_checkout_is_named_relative_to_it(checkout: Path) -> None:
    assert source_of(f"{checkout}/src/foo.c:3: error", checkout) == ("src/foo.c", 3, None)


def test_a_step_run_in_a_subdirectory_names_its_files_from_there(checkout: Path) -> None:
    (checkout / "lib").mkdir()
    (checkout / "lib" / "util.c").write_text("\n")
    cwd = checkout / "lib"
    assert source_of("util.c:9:1: error", checkout, cwd) == ("lib/util.c", 9, 1)
    assert source_of("src/foo.c:2: error", checkout, cwd) == ("src/foo.c", 2, None)
    assert source_of("util.c:9:1: error", checkout) is None


@pytest.mark.parametrize(
    "text",
    [
        "dial tcp: lookup registry.example.com:443: no such host",
        "GET https://example.com/src/foo.c:12 failed",
        "../outside.c:3: error: escapes the checkout",
        'File "/usr/lib/python3.11/json/decoder.py", line 355, in raw_decode',
        "src/missing.c:3: error",
        "log:3: make: *** [all] Error 1",
        "src/foo.c:0: no line zero",
    ],
)
def test_a_line_naming_no_file_of_the_checkout_points_nowhere(checkout: Path, text: str) -> None:
    assert source_of(text, checkout) is None


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"GITHUB_ACTIONS": "true"}, CI.GITHUB),
        ({"GITLAB_CI": "true"}, CI.GITLAB),
        ({"BUILDKITE": "true"}, CI.BUILDKITE),
        ({"JENKINS_URL": "https://ci/", "BUILD_ID": "7"}, CI.PLAIN),
        ({"GITHUB_ACTIONS": "false"}, CI.PLAIN),
        ({"GITHUB_ACTIONS": "true", "THEOW_CI_OUTPUT": "plain"}, CI.PLAIN),
        ({"GITHUB_ACTIONS": "true", "THEOW_CI_OUTPUT": "auto"}, CI.GITHUB),
        ({"THEOW_CI_OUTPUT": "gitlab"}, CI.GITLAB),
    ],
)
def test_the_ci_is_read_from_its_own_variable_unless_theow_ci_output_chooses(
    environ: dict[str, str], expected: CI
) -> None:
    assert ci_of(environ) is expected


def test_an_unknown_choice_is_an_error_naming_the_variable() -> None:
    with pytest.raises(ValueError, match="THEOW_CI_OUTPUT='teamcity' is not one of auto, plain"):
        ci_of({"THEOW_CI_OUTPUT": "teamcity"})


def test_a_summary_is_bounded_however_long_the_lines_and_however_many_the_outputs() -> None:
    verdict = Verdict(
        failure_id="f-1",
        status=Status.RESOLVED,
        rule="clean_cache",
        mode="fix",
        outputs=tuple({"action": "clean", "output": "x" * 5_000} for _ in range(30)),
        where=tuple(Where("log", n, "E" * 100_000) for n in range(1, 10)),
    )
    text = markdown(verdict, None)

    items = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(items) == MAX_DONE_LINES and items[-1] == "- ... and 21 more"
    assert all(len(line) <= MAX_LINE_CHARS + 20 for line in text.splitlines())
    assert len(text) < 10_000


def test_the_summary_says_the_explanation_of_a_failure_no_rule_explains_in_escaped_words() -> None:
    verdict = Verdict(
        failure_id="f-2",
        status=Status.UNMATCHED,
        where=(Where("log", 12, "E: unable to locate package libfoo"),),
        explanation={
            "state": "explained",
            "cause": "dependency",
            "text": "The package <b>libfoo</b> is not in the image's sources.",
            "next_step": "add its repository before `apt-get install`",
            "model": "qwen",
        },
    )
    text = markdown(verdict, None)

    assert "- likely: dependency: The package &lt;b&gt;libfoo&lt;/b&gt;" in text
    assert "<b>" not in text
    assert "- next: add its repository before" in text
