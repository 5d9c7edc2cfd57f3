"""Which lines of a log a CI system says belong to a step that passed.

Travis runs every command of its ``script`` phase even after one failed, and
after each prints how it ended (``The command "flake8" exited with 1.``). The
output above a failed command's line is why the build failed; the output of a
command that exited with 0 is not, whatever error words it holds (a later
command's "0 errors", a deploy's warnings), and it may run on for thousands of
lines after the failure. GitHub Actions skips the steps after a failed one, so
its logs hold no such lines and nothing changes for them.

>>> log = 'lint\\nE128 bad\\nThe command "flake8" exited with 1.\\nok\\nThe command "deploy" exited with 0.\\nDone'
>>> steps = Steps.read(log)
>>> steps.failed_end, [steps.passed(n) for n in range(1, 7)]
(3, [False, False, False, True, True, False])
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

# Travis' line after each command of a phase (ANSI colour and its time marker may precede it).
STEP_END = re.compile(r'The command "[^\n]*" exited with (\d+)\.')
_MARK = 'The command "'


@dataclass(frozen=True)
class Steps:
    """The line ranges of the steps that passed, and where the first failed step ends."""

    passed_from: tuple[int, ...] = ()  # first line of each passed step, ascending
    passed_to: tuple[int, ...] = ()  # ... and its last line (the CI system's own line)
    failed_end: int | None = None  # 1-based line of the first failed command's end line

    @classmethod
    def read(cls, text: str) -> Steps:
        """The steps ``text`` reports; none (everything counts) when it reports none."""
        if _MARK not in text:
            return NO_STEPS  # most logs: one substring search
        starts: list[int] = []
        ends: list[int] = []
        failed: int | None = None
        previous, line, at = 0, 1, 0
        for found in STEP_END.finditer(text):
            line += text.count("\n", at, found.start())
            at = found.start()
            if found.group(1) == "0":
                starts.append(previous + 1)
                ends.append(line)
            elif failed is None:
                failed = line
            previous = line
        return cls(tuple(starts), tuple(ends), failed)

    def passed(self, number: int) -> bool:
        """Whether line ``number`` (1-based) is in a step that passed."""
        i = bisect.bisect_right(self.passed_from, number) - 1
        return i >= 0 and number <= self.passed_to[i]


NO_STEPS = Steps()
