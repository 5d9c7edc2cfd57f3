"""The integration fleet (real Celery workers, the fake Gemini) for attacks that need one."""

from tests.integration.conftest import (  # noqa: F401 (fixtures, and the fleet's SQL choice)
    explorers,
    fleet,
    fleet_db,
    pytest_generate_tests,
)
