"""The security tests attack a real fleet: the integration tests' fixtures, reused."""

from tests.integration.conftest import (  # noqa: F401  (fixtures and the fleet_db hook)
    explorers,
    fleet,
    fleet_db,
    pytest_generate_tests,
)
