"""The rule catalogue: how many rules know each family of failure, per ecosystem.

``theow rules list --markdown`` prints it; ``make catalogue`` writes it into
docs/rules.md, and a test keeps the two equal, so it is never hand-kept.

A rule's ecosystem is its first tag (the convention: ``[java, maven, test]``),
its family the first tag that names one (``compile``, ``test``, ...); a
``generic`` rule is a wrapper whatever its tags.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from theow_workers.core.rules.schema import Rule, load_rules

# family -> tags that put a rule in it
FAMILIES: dict[str, frozenset[str]] = {
    "compile": frozenset({"compile", "typecheck", "syntax", "linker", "build-script"}),
    "test": frozenset({"test", "tests", "testing"}),
    "dependency": frozenset(
        {"dependency", "dependencies", "lockfile", "go-modules", "version-pin", "checksum"}
    ),
    "lint": frozenset({"lint", "format", "style", "coverage", "license"}),
    "infra": frozenset(
        {
            "infra",
            "infrastructure",
            "network",
            "runner",
            "ci",
            "container",
            "docker",
            "timeout",
            "oom",
            "memory",
            "disk",
            "system-packages",
            "registry",
            "tls",
            "dns",
            "toolchain",
            "ci-image",
        }
    ),
}
WRAPPER, OTHER = "wrapper", "other"
COLUMNS = (*FAMILIES, WRAPPER, OTHER)


def family(rule: Rule) -> str:
    if rule.generic or "wrapper" in rule.tags:
        return WRAPPER
    for tag in rule.tags:
        for name, tags in FAMILIES.items():
            if tag in tags:
                return name
    return OTHER


def ecosystem(rule: Rule) -> str:
    first = rule.tags[0] if rule.tags else "any"
    return "any" if any(first in tags for tags in FAMILIES.values()) else first


def markdown(rules: Iterable[Rule]) -> str:
    counts: Counter[tuple[str, str]] = Counter()
    per_ecosystem: Counter[str] = Counter()
    per_family: Counter[str] = Counter()
    for rule in rules:
        key = (ecosystem(rule), family(rule))
        counts[key] += 1
        per_ecosystem[key[0]] += 1
        per_family[key[1]] += 1
    columns = [c for c in COLUMNS if per_family[c]]
    lines = [
        "| ecosystem | " + " | ".join(columns) + " | rules |",
        "| --- | " + " | ".join("---:" for _ in columns) + " | ---: |",
    ]
    for name, total in sorted(per_ecosystem.items(), key=lambda item: (-item[1], item[0])):
        cells = [str(counts[(name, c)] or "") for c in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {total} |")
    totals = [str(per_family[c]) for c in columns]
    lines.append("| **all** | " + " | ".join(totals) + f" | {sum(per_family.values())} |")
    return "\n".join(lines) + "\n"


START, END = "<!-- rules-catalogue:start -->\n", "<!-- rules-catalogue:end -->"


def rewrite(page: Path, rules_dir: Path) -> bool:
    """Put the catalogue of ``rules_dir`` between the markers of ``page``; whether it changed."""
    text = page.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    updated = head + START + markdown(load_rules(rules_dir).rules) + END + tail
    page.write_text(updated, encoding="utf-8")
    return updated != text


PAGE = Path("docs") / "rules.md"  # where the catalogue is shown, relative to the checkout

if __name__ == "__main__":  # make catalogue
    root = Path(__file__).resolve().parent.parent
    print(
        f"rule catalogue in {PAGE}",
        "updated" if rewrite(root / PAGE, root / "rules") else "unchanged",
    )
