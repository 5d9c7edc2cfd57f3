"""Reading a replay history: bad lines are reported with their numbers, never fatal."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from theow_workers.replay.reader import HistoryError, check, read_lines, scan, spool


def write(path: Path, *lines: str | bytes) -> Path:
    data = b"".join((ln if isinstance(ln, bytes) else ln.encode()) + b"\n" for ln in lines)
    path.write_bytes(data)
    return path


def problems(path: Path, **kwargs) -> dict[int, str]:
    return {ln.number: ln.problem for ln in read_lines(path, **kwargs) if ln.problem}


def test_every_bad_line_is_reported_with_its_line_number_and_the_rest_is_read(tmp_path):
    path = write(
        tmp_path / "h.jsonl",
        json.dumps({"stderr": "boom", "exit_code": 2}),
        "{not json",
        "[1, 2, 3]",
        '"a string"',
        "",
        "{}",
        '{"": "empty fact name"}',
        json.dumps({"stderr": "boom", "exit_code": 2}),
        json.dumps({"stderr": "second"}),
    )
    lines = list(read_lines(path))
    assert [ln.number for ln in lines] == [1, 2, 3, 4, 6, 7, 8, 9]  # blank line 5 skipped
    assert problems(path) == {
        2: "not JSON: Expecting property name enclosed in double quotes (column 2)",
        3: "not a JSON object but an array",
        4: "not a JSON object but a string",
        6: "empty object: no facts",
        7: "invalid facts: fact names must be non-empty strings, got ''",
        8: "duplicate of line 1",
    }
    assert lines[0].facts == {"stderr": "boom", "exit_code": 2}
    assert lines[-1].facts == {"stderr": "second"}


def test_an_empty_file_has_no_lines(tmp_path):
    path = write(tmp_path / "empty.jsonl")
    assert list(read_lines(path)) == []
    assert scan(path).lines == 0


def test_scan_counts_non_blank_lines_and_hashes_the_content(tmp_path):
    a = write(tmp_path / "a.jsonl", '{"x": 1}', "", '{"x": 2}')
    b = write(tmp_path / "b.jsonl", '{"x": 1}', "", '{"x": 3}')
    assert scan(a).lines == 2
    assert scan(a).sha256 != scan(b).sha256
    assert scan(a).sha256 == scan(a).sha256


def test_a_line_longer_than_the_cap_is_skipped_and_reported(tmp_path):
    path = write(
        tmp_path / "h.jsonl",
        json.dumps({"stderr": "x" * 5000}),
        json.dumps({"stderr": "fine"}),
    )
    lines = list(read_lines(path, max_line_bytes=1000))
    assert lines[0].problem == "line longer than 1000 bytes (5015)"
    assert lines[1].facts == {"stderr": "fine"}
    assert scan(path, max_line_bytes=1000).lines == 2


def test_big_text_facts_are_bounded_and_invalid_utf8_replaced(tmp_path):
    path = write(
        tmp_path / "h.jsonl",
        json.dumps({"stderr": "head\n" + "x" * 10_000 + "\nerror: the end"}),
        b'{"stderr": "caf\xe9 error"}',
    )
    big, latin = list(read_lines(path, fact_limit=1000))
    assert len(big.facts["stderr"]) < 1200 and big.facts["stderr"].endswith("error: the end")
    assert big.notes["truncated"]["stderr"]["original_chars"] > 10_000
    assert latin.facts == {"stderr": "caf\ufffd error"}


def test_a_200_mb_history_is_streamed_in_bounded_memory(tmp_path):
    """Given a 200 MB file (and one 20 MB line), reading it never holds it whole."""
    path = tmp_path / "big.jsonl"
    log = ("step ok\n" * 12_000)[:96_000]
    with path.open("w") as out:
        for i in range(2_000):
            out.write(json.dumps({"stderr": log + f"error {i}", "job": f"j{i}"}) + "\n")
        out.write(json.dumps({"stderr": "y" * 20_000_000}) + "\n")
    assert path.stat().st_size > 200_000_000
    script = textwrap.dedent(
        f"""
        import resource, sys
        from pathlib import Path
        from theow_workers.replay.reader import read_lines, scan
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        info = scan(Path({str(path)!r}))
        facts = problems = 0
        for line in read_lines(Path({str(path)!r})):
            facts += line.facts is not None
            problems += line.problem is not None
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(info.lines, facts, problems, (after - before) // 1024)
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    lines, facts, bad, grown_mb = map(int, run.stdout.split())
    assert (lines, facts, bad) == (2_001, 2_000, 1)  # the 20 MB line exceeds the 16 MB cap
    assert grown_mb < 100, f"peak RSS grew by {grown_mb} MB reading a 200 MB file"


def test_a_gzipped_history_reads_as_the_plain_one_and_eval_reads_it_the_same_way(tmp_path):
    from theow_workers import evaluation

    plain = write(tmp_path / "h.jsonl", json.dumps({"stderr": "boom"}), "{oops", '{"x": 1}')
    packed = tmp_path / "h.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert [(ln.number, ln.facts, ln.problem) for ln in read_lines(packed)] == [
        (ln.number, ln.facts, ln.problem) for ln in read_lines(plain)
    ]
    assert (scan(packed).lines, scan(packed).sha256) == (scan(plain).lines, scan(plain).sha256)
    assert (
        list(evaluation.read_jsonl(packed))
        == list(evaluation.read_jsonl(plain))
        == [
            (1, {"stderr": "boom"}, None),
            (
                2,
                None,
                "line 2: not JSON: Expecting property name enclosed in double quotes (column 2)",
            ),
            (3, {"x": 1}, None),
        ]
    )


@pytest.mark.parametrize(
    ("name", "data", "problem"),
    [
        (
            "gz.jsonl",
            gzip.compress(b'{"x": 1}\n', mtime=0),
            "gzip-compressed data; name it gz.jsonl.gz",
        ),
        ("plain.jsonl.gz", b'{"x": 1}\n', "named .gz but not gzip data"),
        ("cut.jsonl.gz", gzip.compress(b'{"x": 1}\n' * 1000, mtime=0)[:40], "damaged gzip data"),
        ("image.jsonl", bytes(range(256)) * 64, "binary data, not JSON Lines"),
        ("one.jsonl", b"hello\n", "not JSON Lines: its one line is not a JSON object (line 1:"),
        (
            "log.jsonl",
            b"\n".join([b"step", b"", b'{"x": 1}'] + [b"error: it broke"] * 200),
            "not JSON Lines: only 1 of its first 100 lines are JSON objects (line 1: not JSON",
        ),
    ],
)
def test_a_file_that_is_not_json_lines_is_refused_naming_the_file_and_why(
    tmp_path, name, data, problem
):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(HistoryError) as scanned:
        scan(path)
    assert str(scanned.value).startswith(f"{path}: {problem}")
    with pytest.raises(HistoryError) as checked:
        check(path)
    assert str(checked.value) == str(scanned.value)


def test_a_few_bad_lines_in_a_history_are_tolerated(tmp_path):
    lines = [json.dumps({"stderr": f"e{i}"}) for i in range(20)]
    lines[3:3] = ["{oops", "[1]"]
    path = write(tmp_path / "h.jsonl", *lines)
    check(path)
    assert scan(path).lines == 22


def test_standard_input_is_kept_as_a_file_named_by_its_content(tmp_path):
    data = b'{"stderr": "boom"}\n'
    first = spool(io.BytesIO(data), tmp_path / "in")
    assert first.read_bytes() == data and first.name.endswith(".jsonl")
    assert spool(io.BytesIO(data), tmp_path / "in") == first
    packed = spool(io.BytesIO(gzip.compress(data)), tmp_path / "in")
    assert packed.name.endswith(".jsonl.gz") and scan(packed).sha256 == scan(first).sha256
    assert sorted(p.name for p in (tmp_path / "in").iterdir()) == sorted([first.name, packed.name])
