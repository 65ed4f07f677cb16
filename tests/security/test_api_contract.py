"""schemathesis against /api/schema/: every operation, as a member, an admin and an
operator, with generated (valid and invalid) input. Fails on any 5xx, or a response the
schema does not describe. Bounded: a few examples per operation and role."""

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
)

from console.services import create_api_token

EXAMPLES = 3


# Loaded from the running application at collection time (the schema view reads no rows).
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())
# Bounded: the schema's examples and EXAMPLES generated cases per operation; the coverage
# phase (every boundary of every parameter, thousands of cases) is left to manual runs.
schema.config.phases.update(phases=["examples", "fuzzing"])


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    """The WSGI handler closes database connections when a request ends (as in production);
    inside a test transaction on PostgreSQL that would end the test's own connection, so,
    as Django's test client does, not here."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def role_tokens(db, alice, bob, ops):
    return {
        who.username: create_api_token(actor=who, user=who, name="contract")[1] for who in (alice, bob, ops)
    }


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@pytest.mark.django_db
def test_the_api_keeps_its_contract(case, role_tokens, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_CLASSES": []}
    for token in role_tokens.values():  # a member, an admin and an operator
        case.call_and_validate(
            headers={"Authorization": f"Token {token}"},
            checks=[not_a_server_error, response_schema_conformance, content_type_conformance],
        )
