"""Compile, type and lint failures: the shipped rule that explains each, what it captures, and
the line it shows a person.

Each log excerpt goes through the resolver with the shipped rules (as `theow rules eval`
and a worker do). A wrapper rule marked generic ("make: *** Error", "Process completed with
exit code") sits in the same book, so the compiler's or linter's own line has to win over it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from theow_workers.core.actions import load_actions
from theow_workers.core.resolve.plan import Hints, RuleBook, plan
from theow_workers.core.rules.schema import load_rules, parse_rule

ROOT = Path(__file__).resolve().parents[3]

# A wrapper true of nearly every failed log: it may only win when nothing specific matched.
WRAPPER = parse_rule(
    "name: test_wrapper_exit\nmode: track\ngeneric: true\ndescription: wrapper\n"
    "when:\n  - fact: log\n    regex: '(?m)^(?:make(?:\\[\\d+\\])?: \\*\\*\\* [^\\n]*Error \\d+"
    "|##\\[error\\]Process completed with exit code \\d+)'\n"
)


@pytest.fixture(scope="module")
def book() -> RuleBook:
    actions = load_actions(ROOT / "actions")
    ruleset = load_rules(ROOT / "rules", known_actions=frozenset(actions.names()))
    assert not ruleset.errors, "\n".join(str(e) for e in ruleset.errors)
    return RuleBook((*ruleset.rules, WRAPPER), "test")


def explain(book: RuleBook, log: str) -> tuple[str | None, dict[str, Any], str | None]:
    """The chosen rule, its named captures and its evidence line, as the eval reports them."""
    attempts = plan(book, {"log": log, "problem_type": "build_failure"}, Hints()).attempts
    if not attempts:
        return None, {}, None
    match = attempts[0].match
    assert match is not None
    evidence = match.evidence.text if match.evidence else None
    return attempts[0].rule, dict(match.captures.named), evidence


CASES: list[tuple[str, str, str, dict[str, str], str]] = [
    (
        "gcc-before-make-wrapper",
        "CC src/subprocess.o\n"
        "In file included from src/lua.h:14:0,\n"
        "                 from src/subprocess.c:7:\n"
        "src/subprocess.h:21:29: error: unknown type name 'fd_set'\n"
        " int process_before_tick(fd_set *);\n"
        "                             ^\n"
        "src/subprocess.c:97:29: error: unknown type name 'fd_set'\n"
        "make: *** [Makefile:42: src/subprocess.o] Error 1\n",
        "c_compile_error",
        {"file": "src/subprocess.h", "line": "21", "message": "unknown type name 'fd_set'"},
        "src/subprocess.h:21:29: error: unknown type name 'fd_set'",
    ),
    (
        "clang-coloured",
        "[ 40%] Building CXX object CMakeFiles/engine.dir/src/render.cpp.o\n"
        "\x1b[1msrc/render.cpp:212:18: \x1b[0m\x1b[0;1;31merror: \x1b[0m\x1b[1mno member named "
        "'flush' in 'Canvas'\x1b[0m\n"
        "1 error generated.\n",
        "c_compile_error",
        {"file": "src/render.cpp", "line": "212", "message": "no member named 'flush' in 'Canvas'"},
        "\x1b[1msrc/render.cpp:212:18: \x1b[0m\x1b[0;1;31merror: \x1b[0m\x1b[1mno member named "
        "'flush' in 'Canvas'\x1b[0m",
    ),
    (
        "msvc",
        "  codec.cpp\n"
        "C:\\a\\engine\\src\\codec.cpp(88,17): error C2065: 'ssize_t': undeclared identifier "
        "[C:\\a\\engine\\build\\core.vcxproj]\n",
        "c_compile_error",
        {"file": "C:\\a\\engine\\src\\codec.cpp", "line": "88", "code": "C2065"},
        "C:\\a\\engine\\src\\codec.cpp(88,17): error C2065: 'ssize_t': undeclared identifier "
        "[C:\\a\\engine\\build\\core.vcxproj]",
    ),
    (
        "javac-maven",
        "[INFO] --- maven-compiler-plugin:3.11.0:compile (default-compile) @ billing ---\n"
        "[ERROR] /w/billing/src/main/java/com/acme/Invoice.java:[41,27] incompatible types: "
        "java.lang.String cannot be converted to java.math.BigDecimal\n"
        "[INFO] BUILD FAILURE\n",
        "java_compile_error",
        {"file": "/w/billing/src/main/java/com/acme/Invoice.java", "line": "41"},
        "[ERROR] /w/billing/src/main/java/com/acme/Invoice.java:[41,27] incompatible types: "
        "java.lang.String cannot be converted to java.math.BigDecimal",
    ),
    (
        "kotlinc",
        "> Task :app:compileDebugKotlin FAILED\n"
        "e: file:///w/app/src/main/kotlin/com/acme/Session.kt:57:24 Type mismatch: inferred type "
        "is String? but String was expected\n",
        "kotlin_compile_error",
        {"file": "/w/app/src/main/kotlin/com/acme/Session.kt", "line": "57"},
        "e: file:///w/app/src/main/kotlin/com/acme/Session.kt:57:24 Type mismatch: inferred type "
        "is String? but String was expected",
    ),
    (
        "scalac-sbt-crlf",
        "[info] Compiling 4 Scala sources to /w/exp/target/scala-2.12/test-classes ...\r\n"
        "[error] /w/exp/src/test/scala/org/example/EndToEndTest.scala:6:35: object utils is not "
        "a member of package org.example.client\r\n"
        "[error] (exp / Test / compileIncremental) Compilation failed\r\n",
        "scala_compile_error",
        {"file": "/w/exp/src/test/scala/org/example/EndToEndTest.scala", "line": "6"},
        "[error] /w/exp/src/test/scala/org/example/EndToEndTest.scala:6:35: object utils is not "
        "a member of package org.example.client",
    ),
    (
        "csc-behind-terminal-escapes",
        "\x1b[?1h\x1b=\x1b[31mExtensions/StringExtensions.cs(20,40): error CS0103: The name 'key' "
        "does not exist in the current context [/w/src/Core/Core.csproj]\n",
        "csharp_compile_error",
        {"file": "Extensions/StringExtensions.cs", "line": "20", "code": "CS0103"},
        "Extensions/StringExtensions.cs(20,40): error CS0103: The name 'key' does not exist in "
        "the current context [/w/src/Core/Core.csproj]",
    ),
    (
        "swift-xcpretty",
        "▸ Compiling ActionSpec.swift\n"
        "\x1b[31m❌  \x1b[0m/Users/ci/App/AppTests/ActionSpec.swift:62:19: \x1b[31m'value' is "
        "inaccessible due to 'internal' protection level\x1b[0m\n",
        "swift_compile_error",
        {
            "file": "/Users/ci/App/AppTests/ActionSpec.swift",
            "line": "62",
            "message": "'value' is inaccessible due to 'internal' protection level",
        },
        "❌  \x1b[0m/Users/ci/App/AppTests/ActionSpec.swift:62:19: \x1b[31m'value' is "
        "inaccessible due to 'internal' protection level\x1b[0m",
    ),
    (
        "ghc-werror",
        "[16 of 147] Compiling Text.Doc.Notebook ( src/Text/Doc/Notebook.hs, dist/Notebook.o )\n\n"
        "src/Text/Doc/Notebook.hs:94:10: Warning:\n"
        "    No explicit implementation for\n"
        "      \u2018mappend\u2019\n\n"
        "<no location info>:\n"
        "Failing due to -Werror.\n",
        "haskell_compile_error",
        {
            "file": "src/Text/Doc/Notebook.hs",
            "line": "94",
            "message": "No explicit implementation for",
        },
        "src/Text/Doc/Notebook.hs:94:10: Warning:",
    ),
    (
        "erlc-warnings-as-errors-before-make-wrapper",
        " ERLC\t../ebin/codegen.beam\n"
        "compile: warnings being treated as errors\n"
        "codegen.erl:127: import lists:umerge/1 is unused\n"
        "make[3]: *** [../ebin/codegen.beam] Error 1\n",
        "erlang_compile_error",
        {"file": "codegen.erl", "line": "127", "message": "import lists:umerge/1 is unused"},
        "compile: warnings being treated as errors",
    ),
    (
        "elixir",
        "== Compilation error in file lib/shop/cart.ex ==\n"
        "** (CompileError) lib/shop/cart.ex:41: undefined function total/1\n",
        "elixir_compile_error",
        {"kind": "CompileError", "file": "lib/shop/cart.ex", "line": "41"},
        "** (CompileError) lib/shop/cart.ex:41: undefined function total/1",
    ),
    (
        "rustc-coloured",
        "\x1b[0m\x1b[1m\x1b[38;5;9merror[E0407]\x1b[0m\x1b[0m\x1b[1m: method `oom` is not a member "
        "of trait `Alloc`\x1b[0m\n"
        "\x1b[0m  \x1b[0m\x1b[0m\x1b[1m\x1b[38;5;12m--> \x1b[0m\x1b[0msrc/allocator.rs:40:5\x1b[0m\n"
        "make: *** [Makefile:12: build] Error 101\n",
        "rust_compile_error",
        {
            "code": "0407",
            "message": "method `oom` is not a member of trait `Alloc`",
            "file": "src/allocator.rs",
            "line": "40",
        },
        "error[E0407]\x1b[0m\x1b[0m\x1b[1m: method `oom` is not a member of trait `Alloc`\x1b[0m",
    ),
    (
        "python-syntax",
        "Traceback (most recent call last):\n"
        '  File "/w/setup.py", line 3, in <module>\n'
        "    from app.version import VERSION\n"
        '  File "/w/app/version.py", line 12\n'
        "    if (n := len(parts)) > 2:\n"
        "          ^\n"
        "SyntaxError: invalid syntax\n",
        "python_syntax_error",
        {"file": "/w/app/version.py", "line": "12", "error": "SyntaxError"},
        'File "/w/app/version.py", line 12',
    ),
    (
        "node-syntax",
        "/w/site/tasks/serve.js:31\r\n"
        "    console.log(`Serving @ ${address.port}`, );\r\n"
        "                                             ^\r\n\r\n"
        "SyntaxError: Unexpected token )\r\n"
        "    at createScript (vm.js:56:10)\r\n",
        "node_syntax_error",
        {"file": "/w/site/tasks/serve.js", "line": "31"},
        "SyntaxError: Unexpected token )",
    ),
    (
        "php-parse",
        "PHP Parse error:  syntax error, unexpected 'fn' (T_STRING) in /w/src/Router.php on line 41\n",
        "php_parse_error",
        {"file": "/w/src/Router.php", "line": "41"},
        "PHP Parse error:  syntax error, unexpected 'fn' (T_STRING) in /w/src/Router.php on line 41",
    ),
    (
        "perl",
        't/01-basic.t ..\nsyntax error at lib/App/Config.pm line 41, near "} else"\n',
        "perl_compile_error",
        {"message": "syntax error", "file": "lib/App/Config.pm", "line": "41"},
        'syntax error at lib/App/Config.pm line 41, near "} else"',
    ),
    (
        "latex",
        "(/usr/share/texlive/texmf-dist/tex/latex/base/article.cls\n"
        "! Undefined control sequence.\n"
        "l.42 \\includegraphicx\n",
        "latex_error",
        {"message": "Undefined control sequence.", "line": "42"},
        "! Undefined control sequence.",
    ),
    (
        "cmake-configure",
        "CMake Error at CMakeLists.txt:1 (cmake_minimum_required):\n"
        "  CMake 3.28 or higher is required.  You are running version 3.22.1\n\n"
        "-- Configuring incomplete, errors occurred!\n",
        "cmake_configure_error",
        {"file": "CMakeLists.txt", "line": "1", "command": "cmake_minimum_required"},
        "CMake Error at CMakeLists.txt:1 (cmake_minimum_required):",
    ),
    (
        "eslint-github-actions-before-exit-code",
        "2025-03-12T11:39:26.5650000Z /home/runner/work/ui/ui/src/Menu.tsx\n"
        "2025-03-12T11:39:26.5659135Z ##[error]  1:8  error  'Link' is defined but never used  "
        "@typescript-eslint/no-unused-vars\n"
        "2025-03-12T11:39:26.5666113Z ✖ 1 problem (1 error, 0 warnings)\n"
        "2025-03-12T11:39:26.5700000Z ##[error]Process completed with exit code 1.\n",
        "eslint_errors",
        {"file": "/home/runner/work/ui/ui/src/Menu.tsx", "line": "1"},
        # The message under the annotation, as without one; shown as the log printed it.
        "##[error]  1:8  error  'Link' is defined but never used  @typescript-eslint/no-unused-vars",
    ),
    (
        "standard",
        "standard: Use JavaScript Standard Style (https://standardjs.com)\n"
        "standard: Run `standard --fix` to automatically fix some problems.\n"
        "  /w/app/lib/challenges.js:34:25: Unnecessary return statement.\n",
        "js_standard_style",
        {"tool": "standard", "file": "/w/app/lib/challenges.js", "line": "34"},
        "standard: Use JavaScript Standard Style (https://standardjs.com)",
    ),
    (
        "prettier-check",
        "Checking formatting...\n"
        "[warn] src/styles/colors.css\n"
        "[warn] src/app.tsx\n"
        "[warn] Code style issues found in 2 files. Run Prettier with --write to fix.\n",
        "prettier_check_failed",
        {"file": "src/styles/colors.css"},
        "[warn] src/styles/colors.css",
    ),
    (
        "codespell",
        "##[error]./src/store.cpp:160: unexpect ==> unexpected\n"
        "Codespell found one or more problems\n"
        "##[error]Process completed with exit code 65.\n",
        "codespell_misspelling",
        {"file": "./src/store.cpp", "line": "160", "word": "unexpect"},
        "##[error]./src/store.cpp:160: unexpect ==> unexpected",
    ),
    (
        "flake8",
        "$ flake8\n./app/rules/init.py:8:9: E128 continuation line under-indented for visual indent\n",
        "python_lint_violations",
        {"file": "./app/rules/init.py", "line": "8", "code": "E128"},
        "./app/rules/init.py:8:9: E128 continuation line under-indented for visual indent",
    ),
    (
        "ruff-syntax",
        "nb/solutions.ipynb:1:1: Expected a Jupyter Notebook, which must be internally stored as "
        "JSON, but this file isn't valid JSON\nFound 1 error.\n",
        "python_lint_violations",
        {"file": "nb/solutions.ipynb", "line": "1"},
        "nb/solutions.ipynb:1:1: Expected a Jupyter Notebook, which must be internally stored as "
        "JSON, but this file isn't valid JSON",
    ),
    (
        "black",
        "would reformat /w/src/app/views.py\n\nOh no! 💥 💔 💥\n1 file would be reformatted.\n",
        "python_format_check_failed",
        {"file": "/w/src/app/views.py"},
        "would reformat /w/src/app/views.py",
    ),
    (
        "rubocop",
        "Offenses:\n\n"
        "\x1b[36mlib/site/reader.rb\x1b[0m:53:21: \x1b[33mC\x1b[0m: Performance/RegexpMatch: Use "
        "match? instead of =~ when MatchData is not used.\n",
        "rubocop_offenses",
        {
            "file": "lib/site/reader.rb",
            "line": "53",
            "severity": "C",
            "cop": "Performance/RegexpMatch",
        },
        "\x1b[36mlib/site/reader.rb\x1b[0m:53:21: \x1b[33mC\x1b[0m: Performance/RegexpMatch: Use "
        "match? instead of =~ when MatchData is not used.",
    ),
    (
        "markdownlint",
        "/w/docs/start.md: 78: MD031/blanks-around-fences Fenced code blocks should be surrounded "
        "by blank lines\n",
        "markdownlint_violations",
        {"file": "/w/docs/start.md", "line": "78", "rule": "MD031"},
        "/w/docs/start.md: 78: MD031/blanks-around-fences Fenced code blocks should be surrounded "
        "by blank lines",
    ),
    (
        "gometalinter",
        ">>> build/bin/gometalinter.v2 --vendor --enable=goimports ./...\n"
        "eth/config.go:1::warning: file is not goimported (goimports)\n",
        "go_lint_failed",
        {"file": "eth/config.go", "line": "1", "linter": "goimports"},
        "eth/config.go:1::warning: file is not goimported (goimports)",
    ),
    (
        "tsc-coloured-with-its-summary",
        "\x1b[96msrc/api/client.ts\x1b[0m:\x1b[93m12\x1b[0m:\x1b[93m5\x1b[0m - \x1b[91merror\x1b[0m"
        "\x1b[90m TS2345: \x1b[0mArgument of type 'string' is not assignable to parameter of type "
        "'number'.\n\n12     send(id)\n\nFound 1 error in src/api/client.ts\x1b[90m:12\x1b[0m\n",
        "typescript_type_errors",
        {"file": "src/api/client.ts", "line": "12", "code": "2345"},
        "\x1b[96msrc/api/client.ts\x1b[0m:\x1b[93m12\x1b[0m:\x1b[93m5\x1b[0m - \x1b[91merror\x1b[0m"
        "\x1b[90m TS2345: \x1b[0mArgument of type 'string' is not assignable to parameter of type "
        "'number'.",
    ),
    (
        "mypy-first-error-not-summary",
        "+ mypy src\n"
        'src/orders/service.py:112: error: Argument 1 to "charge" has incompatible type  [arg-type]\n'
        "Found 1 error in 1 file (checked 87 source files)\n",
        "python_type_errors",
        {"file": "src/orders/service.py", "line": "112"},
        'src/orders/service.py:112: error: Argument 1 to "charge" has incompatible type  [arg-type]',
    ),
    (
        "go-build-github-actions",
        "2025-04-14T11:29:09.3410015Z # example.com/app/cmd/app\n"
        "2025-04-14T11:29:09.3410020Z cmd/app/main.go:41:17: undefined: config.LoadWithDefaults\n"
        "2025-04-14T11:29:09.3410030Z ##[error]Process completed with exit code 1.\n",
        "go_compile_error",
        {"file": "cmd/app/main.go", "line": "41"},
        "cmd/app/main.go:41:17: undefined: config.LoadWithDefaults",
    ),
    (
        "esbuild",
        '\u2718 [ERROR] Expected ";" but found "}"\n\n    src/lib/format.ts:41:2:\n',
        "esbuild_build_error",
        {"message": 'Expected ";" but found "}"', "file": "src/lib/format.ts", "line": "41"},
        '\u2718 [ERROR] Expected ";" but found "}"',
    ),
    (
        "checkstyle-maven",
        "[ERROR] src/main/java/com/acme/OrderService.java:[57,21] (whitespace) WhitespaceAround: "
        "'{' is not preceded with whitespace.\n",
        "java_static_analysis_failed",
        {
            "file": "src/main/java/com/acme/OrderService.java",
            "line": "57",
            "check": "WhitespaceAround",
        },
        "[ERROR] src/main/java/com/acme/OrderService.java:[57,21] (whitespace) WhitespaceAround: "
        "'{' is not preceded with whitespace.",
    ),
    (
        "coverage-py-fail-under",
        "TOTAL    2104    318    85%\nFAIL Required test coverage of 90% not reached. "
        "Total coverage: 84.89%\n",
        "coverage_threshold_not_met",
        {"required": "90", "actual": "84.89"},
        "FAIL Required test coverage of 90% not reached. Total coverage: 84.89%",
    ),
    (
        "pre-commit",
        "trim trailing whitespace.................................................Passed\n"
        "black....................................................................Failed\n"
        "- hook id: black\n- files were modified by this hook\n",
        "pre_commit_hook_failed",
        {"hook": "black"},
        "black....................................................................Failed",
    ),
    (
        "shellcheck",
        "In scripts/release.sh line 12:\ncp $SRC $DEST\n   ^--^ SC2086 (info): Double quote to "
        "prevent globbing and word splitting.\n",
        "shell_lint_failed",
        {"file": "scripts/release.sh", "line": "12", "code": "SC2086"},
        "In scripts/release.sh line 12:",
    ),
    (
        "clang-format-not-a-compile-error",
        "src/engine/render.cpp:41:18: error: code should be clang-formatted "
        "[-Wclang-format-violations]\n",
        "cpp_lint_failed",
        {"file": "src/engine/render.cpp", "line": "41", "check": "-Wclang-format-violations"},
        "src/engine/render.cpp:41:18: error: code should be clang-formatted "
        "[-Wclang-format-violations]",
    ),
    (
        "swiftlint-not-a-compile-error",
        "Sources/Core/Parser.swift:12:9: error: Force Cast Violation: Force casts should be avoided "
        "(force_cast)\n",
        "swiftlint_violations",
        {"file": "Sources/Core/Parser.swift", "line": "12", "rule": "force_cast"},
        "Sources/Core/Parser.swift:12:9: error: Force Cast Violation: Force casts should be avoided "
        "(force_cast)",
    ),
    (
        "ktlint",
        'src/main/kotlin/com/acme/Session.kt:42:1: Unexpected blank line(s) before "}" '
        "(standard:no-blank-line-before-rbrace)\n",
        "jvm_format_check_failed",
        {"file": "src/main/kotlin/com/acme/Session.kt", "line": "42"},
        'src/main/kotlin/com/acme/Session.kt:42:1: Unexpected blank line(s) before "}" '
        "(standard:no-blank-line-before-rbrace)",
    ),
    (
        "rustfmt",
        "Diff in /w/proxy/src/pool.rs at line 64:\n     let first = self.conns.first();\n",
        "rust_format_check_failed",
        {"file": "/w/proxy/src/pool.rs", "line": "64"},
        "Diff in /w/proxy/src/pool.rs at line 64:",
    ),
    (
        "psalm",
        "ERROR: UndefinedMethod - src/Cache/Store.php:17:23 - Method App\\Cache\\Store::flushAll "
        "does not exist\n",
        "php_static_analysis_failed",
        {"check": "UndefinedMethod", "file": "src/Cache/Store.php", "line": "17"},
        "ERROR: UndefinedMethod - src/Cache/Store.php:17:23 - Method App\\Cache\\Store::flushAll "
        "does not exist",
    ),
    (
        "biome",
        "./e2e/flows/login.cy.ts format \u2501\u2501\u2501\u2501\u2501\u2501\n",
        "biome_check_failed",
        {"file": "./e2e/flows/login.cy.ts", "category": "format"},
        "./e2e/flows/login.cy.ts format \u2501\u2501\u2501\u2501\u2501\u2501",
    ),
    (
        "knip",
        "Unused dependencies (1)\n@acme/is-identifier  package.json:39:6\n",
        "knip_issues",
        {"kind": "Unused dependencies", "item": "@acme/is-identifier  package.json:39:6"},
        "Unused dependencies (1)",
    ),
    (
        "ruff-arrow-format",
        "F401 [*] `os` imported but unused\n --> src/service/api.py:3:8\n  |\n3 | import os\n",
        "python_lint_violations",
        {"code": "F401", "file": "src/service/api.py", "line": "3"},
        "F401 [*] `os` imported but unused",
    ),
    (
        "nextjs-type-error",
        "Failed to compile.\n\n./src/app/orders/page.tsx:41:12\n"
        "Type error: Property 'total' does not exist on type 'Order'.\n",
        "nextjs_build_error",
        {"file": "./src/app/orders/page.tsx", "line": "41", "kind": "Type error"},
        "./src/app/orders/page.tsx:41:12",
    ),
    (
        "vite-esbuild-transform",
        "[vite:esbuild] Transform failed with 1 error:\n"
        'src/lib/format.ts:41:2: ERROR: Expected ";" but found "}"\n',
        "esbuild_build_error",
        {"file": "src/lib/format.ts", "line": "41"},
        'src/lib/format.ts:41:2: ERROR: Expected ";" but found "}"',
    ),
    (
        "angular-cli-tsc",
        "Error: src/app/orders/list.component.ts:12:5 - error TS2339: Property 'items' does not "
        "exist on type 'ListComponent'.\n",
        "typescript_type_errors",
        {"file": "src/app/orders/list.component.ts", "line": "12", "code": "2339"},
        "Error: src/app/orders/list.component.ts:12:5 - error TS2339: Property 'items' does not "
        "exist on type 'ListComponent'.",
    ),
]


@pytest.mark.parametrize(
    ("log", "rule", "captures", "evidence"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_the_tool_message_is_explained_with_what_a_person_needs(
    book: RuleBook, log: str, rule: str, captures: dict[str, str], evidence: str
) -> None:
    chosen, named, line = explain(book, log)
    assert chosen == rule
    assert {k: (named.get(k) or "").rstrip("\r") for k in captures} == captures
    assert line == evidence


def test_a_log_with_no_compiler_or_linter_message_is_left_to_a_wrapper(
    book: RuleBook,
) -> None:
    chosen, _, line = explain(book, "running build.sh\nmake: *** [Makefile:8: all] Error 2\n")
    assert chosen is not None and book.get(chosen).generic  # type: ignore[union-attr]
    assert line == "make: *** [Makefile:8: all] Error 2"


PASSING = [
    pytest.param(
        "src/main.c:12:5: warning: implicit declaration of function 'strlcpy'\n"
        "src/codec.cpp:9: note: -Werror is not enabled\n[100%] Built target engine\n",
        id="gcc-warnings",
    ),
    pytest.param(
        "/w/app/src/utils/date.js\n  3:10  warning  'parseISO' is defined but never used  "
        "no-unused-vars\n\n✖ 1 problem (0 errors, 1 warning)\n",
        id="eslint-warnings-only",
    ),
    pytest.param(
        "Checking formatting...\nAll matched files use Prettier code style!\n", id="prettier-ok"
    ),
    pytest.param("120 files inspected, no offenses detected\n", id="rubocop-ok"),
    pytest.param(
        "[WARNING] /w/app/src/main/java/App.java:[12,8] [deprecation] Date(String) has been deprecated\n"
        "[INFO] BUILD SUCCESS\n",
        id="javac-deprecation",
    ),
    pytest.param(
        "src/Data/Store.hs:12:1: warning: [-Wunused-imports]\n    The import of \u2018Data.List\u2019 is redundant\n",
        id="ghc-warning-without-werror",
    ),
    pytest.param(
        '  File "/w/app/main.py", line 12, in <module>\n    raise SyntaxError("bad template")\n'
        "SyntaxError: bad template\n",
        id="python-raised-syntaxerror-is-runtime",
    ),
    pytest.param(
        "CMake Error at /w/cmake/RunTests.cmake:85 (message):\n  Running functional tests failed.\n",
        id="cmake-script-message-is-not-configure",
    ),
    pytest.param(
        "\x1b[96msrc/components/Message.vue\x1b[0m:\x1b[93m108\x1b[0m:\x1b[93m14\x1b[0m - "
        "\x1b[91merror\x1b[0m\x1b[90m TS2774: \x1b[0mThis condition will always return true.\n"
        "transforming...\n184 modules transformed.\n",
        id="bundler-plugin-prints-a-type-diagnostic-without-failing",
    ),
    pytest.param(
        '  File "/usr/lib/python3/dist-packages/legacy/compat.py", line 12\n'
        '    print "done"\n'
        "               ^\n"
        "SyntaxError: Missing parentheses in call to 'print'\n"
        "Successfully installed legacy-1.0\n",
        id="byte-compiling-an-installed-package",
    ),
    pytest.param(
        "Required test coverage of 80% reached. Total coverage: 91.20%\n", id="coverage-met"
    ),
    pytest.param(
        "black....................................................................Passed\n",
        id="hook-passed",
    ),
]


@pytest.mark.parametrize("log", PASSING)
def test_warnings_and_lookalikes_are_not_explained_as_compile_or_lint_failures(
    book: RuleBook, log: str
) -> None:
    assert explain(book, log)[0] is None
