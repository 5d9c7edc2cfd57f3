"""A test report is written by the build, which runs a pull request's code: hostile XML.

Entity expansion (billion laughs, quadratic blow-up) and external entities (reading a
file of the build agent, or a URL) are refused before anything expands or is fetched;
depth and size are bounded; the refusal is one line naming the file, and the other
reports are still read. Memory is measured with tracemalloc, time is bounded by the
test's timeout (the seconds are measured in benchmarks/junit.py).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from theow_client.junit import read_reports

ROOT = Path(__file__).resolve().parents[2]

GOOD = (
    '<testsuite><testcase classname="calc" name="adds">'
    '<failure message="expected 4">tests/test_calc.py:5: AssertionError</failure>'
    "</testcase></testsuite>"
)
LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE testsuite [\n <!ENTITY lol "lol">\n'
    + "".join(
        f' <!ENTITY lol{n} "{f"&lol{n - 1};" * 10 if n > 1 else "&lol;" * 10}">\n'
        for n in range(1, 10)
    )
    + ']>\n<testsuite><testcase classname="x" name="&lol9;"/></testsuite>\n'
)
QUADRATIC = (
    f'<?xml version="1.0"?>\n<!DOCTYPE t [<!ENTITY a "{"a" * 50_000}">]>\n'
    f'<testsuite><testcase name="{"&a;" * 50_000}"/></testsuite>'
)


def passwd_entity() -> str:
    return (
        '<?xml version="1.0"?>\n<!DOCTYPE testsuite [<!ENTITY p SYSTEM "file:///etc/passwd">]>\n'
        '<testsuite><testcase classname="x" name="leak"><failure message="&p;"/></testcase>'
        "</testsuite>"
    )


def hostile(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    good = tmp_path / "good.xml"
    good.write_text(GOOD)
    return path


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    ("name", "text", "why"),
    [
        ("laughs.xml", LAUGHS, "refused: declares XML entities (entity expansion is not allowed)"),
        (
            "quadratic.xml",
            QUADRATIC,
            "refused: declares XML entities (entity expansion is not allowed)",
        ),
        (
            "passwd.xml",
            passwd_entity(),
            "refused: declares XML entities (entity expansion is not allowed)",
        ),
    ],
)
def test_entity_expansion_is_refused_in_bounded_memory_and_the_good_report_is_read(
    name: str, text: str, why: str, tmp_path: Path
) -> None:
    path = hostile(tmp_path, name, text)
    tracemalloc.start()
    try:
        report, errors = read_reports([path, tmp_path / "good.xml"], root=tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert errors == [f"{path}: {why}"]
    assert peak < 20 * 1024 * 1024
    assert [t.name for t in report.tests] == ["adds"]
    assert "root:" not in str(report.to_json())


def test_an_external_dtd_is_never_fetched(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.5)
        port = server.getsockname()[1]
        path = tmp_path / "dtd.xml"
        path.write_text(
            f'<?xml version="1.0"?>\n<!DOCTYPE testsuite SYSTEM "http://127.0.0.1:{port}/x.dtd">\n'
            + GOOD
        )
        report, errors = read_reports([path], root=tmp_path)
        with pytest.raises(TimeoutError):
            server.accept()  # nobody asked for the DTD
    assert errors == [] and [t.name for t in report.tests] == ["adds"]


def test_an_external_parameter_entity_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "param.xml"
    path.write_text(
        '<?xml version="1.0"?>\n<!DOCTYPE testsuite [<!ENTITY % ext SYSTEM "file:///etc/passwd"> %ext;]>\n'
        + GOOD
    )
    _, errors = read_reports([path], root=tmp_path)
    assert len(errors) == 1 and errors[0].startswith(f"{path}: refused: ")


@pytest.mark.timeout(20)
def test_a_report_nested_a_million_deep_is_refused_without_a_recursion_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "deep.xml"
    path.write_text("<testsuites>" + "<testsuite>" * 1_000_000)
    _, errors = read_reports([path], root=tmp_path)
    assert errors == [f"{path}: nested deeper than 64 elements"]


def test_a_report_past_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.xml"
    with open(path, "wb") as handle:  # sparse: 200 MB on paper, nothing on disk
        handle.truncate(200 * 1024 * 1024)
    _, errors = read_reports([path], root=tmp_path)
    assert errors == [f"{path}: {200 * 1024 * 1024} bytes, more than {50 * 1024 * 1024}"]


@pytest.mark.timeout(60)
def test_the_cli_refuses_a_billion_laughs_in_one_line_and_exits_2(tmp_path: Path) -> None:
    path = hostile(tmp_path, "laughs.xml", LAUGHS)
    process = subprocess.run(
        [sys.executable, "-m", "theow_client.cli", "junit", "laughs.xml", "good.xml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert process.returncode == 2
    assert process.stderr == (
        "theow-client: laughs.xml: refused: declares XML entities "
        "(entity expansion is not allowed)\n"
    )
    assert process.stdout.splitlines()[0] == "tests/test_calc.py:5: calc.adds: failed: expected 4"
    assert path.exists()


@pytest.mark.timeout(30)  # read 16 KB at a time, expat rescanned this token for minutes
def test_one_twenty_megabyte_attribute_is_read_once_and_kept_bounded(tmp_path: Path) -> None:
    path = tmp_path / "long-name.xml"
    path.write_text(
        f'<testsuite><testcase classname="c" name="{"n" * 20_000_000}">'
        '<failure message="boom"/></testcase></testsuite>'
    )
    report, errors = read_reports([path], root=tmp_path)
    assert errors == []
    assert len(report.tests[0].name) <= 500 and report.tests[0].name.startswith("nnn")


@pytest.mark.timeout(120)
def test_a_thousand_failures_with_traces_built_to_be_slow_are_read_in_bounded_work(
    tmp_path: Path,
) -> None:
    trace = ("at " + "a" * 300 + "." + "b" * 200 + ' File "' + "x" * 400 + '" ') * 30
    cases = "".join(
        f'<testcase classname="c" name="t{n}"><failure message="m">{trace}</failure></testcase>'
        for n in range(1000)
    )
    path = tmp_path / "slow.xml"
    path.write_text(f"<testsuite>{cases}</testsuite>")
    report, errors = read_reports([path], root=tmp_path)
    assert errors == [] and len(report.tests) == 1000
    assert all(t.file is None for t in report.tests)
