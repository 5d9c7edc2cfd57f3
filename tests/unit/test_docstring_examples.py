"""The examples in the code's docstrings run as written (``>>>`` lines are a promise to a reader).

Examples marked ``# doctest: +SKIP`` need a running service and are only read.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import theow_client
import theow_workers

# Alembic's env.py runs only inside Alembic; migrations carry no examples.
_NOT_IMPORTABLE = ("theow_workers.migrations",)


def _modules() -> list[str]:
    found = []
    for package in (theow_client, theow_workers):
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
            if not info.name.startswith(_NOT_IMPORTABLE) and not info.name.endswith("__main__"):
                found.append(info.name)
    return sorted(found)


@pytest.mark.parametrize("name", _modules())
def test_the_examples_in_a_modules_docstrings_give_what_they_show(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
