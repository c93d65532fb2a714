"""The contract suite drives the same events through kit.core and through the real
PostgreSQL store; it borrows the integration suite's database fixtures."""

from tests.integration.conftest import (  # noqa: F401  (fixtures)
    _drop_test_topics,
    admin_engine,
    db_url,
    engine,
    template_db,
)
