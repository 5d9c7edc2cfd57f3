"""Hostile inputs, as an attacker or an unlucky build would send them.

Each case is facts (a dict, sent as a client would, or through an old
client's ``facts`` object), a raw ``facts_json`` text, a whole payload, or a
whole raw message body. ``good(n)`` is a failure the fixture rule
``tf_echo`` resolves.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

MB = 1024 * 1024


@dataclass(frozen=True)
class Case:
    name: str
    facts: Any = None  # facts, as a caller hands them to the client
    facts_json: str | None = None  # the wire text, sent as is
    payload: Any = None  # the whole task argument, sent as is
    body: str | None = None  # the whole message body, published raw


def nested_list(levels: int) -> list[Any]:
    root: list[Any] = []
    inner = root
    for _ in range(levels):
        child: list[Any] = []
        inner.append(child)
        inner = child
    return root


def nested_dict(levels: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    inner = root
    for _ in range(levels):
        inner["a"] = {}
        inner = inner["a"]
    return root


def deep_text(levels: int) -> str:
    return '{"stderr": "x", "n": ' + "[" * levels + "]" * levels + "}"


def good(n: int) -> dict[str, Any]:
    return {"stderr": f"step {n}\nECHO word{n}\n", "job": f"build-{n}"}


def cases() -> list[Case]:
    binary = os.urandom(256 * 1024)
    out = [
        # The poison messages: deep nesting that crashed the fleet.
        Case("deep list 520", facts={"stderr": "x", "n": nested_list(520)}),
        Case("deep list 900", facts={"stderr": "x", "n": nested_list(900)}),
        Case("deep dict 600", facts={"stderr": "x", "n": nested_dict(600)}),
        Case("deep list 33", facts={"stderr": "x", "n": nested_list(33)}),
        Case("deep text 1000", facts_json=deep_text(1000)),
        Case("deep text 5000", facts_json=deep_text(5000)),
        Case("deep text 100000", facts_json=deep_text(100_000)),
        Case("deep raw message 5000", body="[[" + "[" * 5000 + "]" * 5000 + "], {}, {}]"),
        Case("deep raw message 600", body="[[" + "[" * 600 + "]" * 600 + "], {}, {}]"),
        Case("raw message not JSON", body="{this is not json"),
        Case("raw message no arguments", body="[[], {}, {}]"),
        Case("raw message two arguments", body='[[{"facts": {}}, 7], {}, {}]'),
        # Bounds below the top level.
        Case("8 MB string in a list", facts={"stderr": "x", "logs": ["y" * 8 * MB]}),
        Case("5 MB nested string", facts={"stderr": "x", "steps": [{"log": "z" * 5 * MB}]}),
        Case("8 MB key", facts={"stderr": "x", "k" * 8 * MB: 1}),
        Case("200k keys", facts={f"k{i}": i for i in range(200_000)}),
        Case("100k values", facts={"stderr": "x", "values": list(range(100_000))}),
        Case("many 60 KB strings", facts={"stderr": "x", "logs": ["w" * 60_000] * 60}),
        Case("2k keys nested", facts={"stderr": "x", "env": {f"V{i}": "1" for i in range(2000)}}),
        # Text that broke fingerprinting, and floods.
        Case("invalid UTF-8 via argv", facts={"stderr": "error: \udcff"}),
        Case("lone surrogate escape", facts_json='{"stderr": "error: \\udcff here"}'),
        Case("lone high surrogate", facts_json='{"stderr": "\\ud800"}'),
        Case("surrogate in a key", facts_json='{"st\\udcffderr": "x"}'),
        Case("NUL flood", facts={"stderr": "\x00" * 200_000}),
        Case("control flood", facts={"stderr": "".join(chr(i % 32) for i in range(300_000))}),
        Case("ANSI flood", facts={"stderr": "\x1b[31;1merror\x1b[0m\r" * 100_000}),
        Case("1 MB single line", facts={"stderr": "e" * MB}),
        Case("zip bomb of lines", facts={"stderr": "error: disk full\n" * 400_000}),
        Case("binary log", facts={"stderr": binary}),
        Case("binary as text", facts={"stderr": binary.decode("latin-1")}),
        Case("zero-width flood", facts={"stderr": "\u200b\u202e" * 200_000}),
        Case("catastrophic regex bait", facts={"stderr": "ECHO " + "a" * 200_000 + "!"}),
        Case("cut marker inside", facts={"stderr": "[... theow: 5 characters omitted ...]"}),
        # Values JSON cannot carry, or should not.
        Case("NaN", facts={"stderr": "x", "ratio": float("nan")}),
        Case("Infinity", facts={"stderr": "x", "ratio": float("inf")}),
        Case("-Infinity text", facts_json='{"stderr": "x", "t": -Infinity}'),
        Case("NaN text", facts_json='{"stderr": "x", "t": NaN}'),
        Case("huge integer", facts={"stderr": "x", "n": 10**300}),
        Case("non-string key", facts={"stderr": "x", 7: "seven"}),
        Case("empty key", facts={"": "x"}),
        Case("stderr is a list", facts={"stderr": ["ECHO a", "ECHO b"]}),
        Case("stderr is an object", facts={"stderr": {"text": "ECHO nested"}}),
        Case("problem_type huge", facts={"stderr": "x", "problem_type": "p" * 100_000}),
        Case("problem_type object", facts={"stderr": "x", "problem_type": {"a": [1, 2]}}),
        Case("SQL in text", facts={"stderr": "'; DROP TABLE failures; --", "job": "x'--"}),
        Case("empty facts", facts={}),
        # Broken wire texts and payloads.
        Case("facts_json not JSON", facts_json='{"stderr": '),
        Case("facts_json empty", facts_json=""),
        Case("facts_json an array", facts_json="[1, 2, 3]"),
        Case("facts_json BOM", facts_json='\ufeff{"stderr": "x"}'),
        Case(
            "facts_json duplicate keys",
            facts_json='{"stderr": "a", "stderr": "ECHO dup", "job": "j"}',
        ),
        Case("facts_json 20 MB", facts_json='{"stderr": "' + "q" * 20 * MB + '"}'),
        Case("payload a string", payload="just a string"),
        Case("payload a list", payload=[1, 2, 3]),
        Case("payload null", payload=None),
        Case("facts_json a number", payload={"facts_json": 42}),
        Case("facts missing", payload={"source": "x"}),
        Case("failure id huge", payload={"failure_id": "f" * 100_000, "facts": {"stderr": "x"}}),
        Case("failure id a number", payload={"failure_id": 12, "facts": {"stderr": "x"}}),
        Case("source huge", payload={"source": "s" * MB, "facts": {"stderr": "x"}}),
        Case("notes huge", payload={"facts": {"stderr": "x"}, "notes": {"n": "m" * 4 * MB}}),
        Case("notes deep", payload={"facts": {"stderr": "x"}, "notes": {"n": nested_list(600)}}),
        Case("hints wrong", payload={"facts": {"stderr": "x"}, "hints": {"max_retries": "many"}}),
        Case("hints huge", payload={"facts": {"stderr": "x"}, "hints": {"rules": ["r"] * 10**5}}),
    ]
    return out
