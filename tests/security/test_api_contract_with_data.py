"""schemathesis's response-schema check on the reads of alerts, alert rules, instances
and jobs with rows present whose optional fields are empty (null): a fleet alert with no
host, team, rule or value, one nobody acknowledged; a pending instance with no host and
no private address; a queued and a cancelled job with no instance. Every answer, list
and detail, must be what the schema says, nullable fields included; and no serializer
anywhere declares a field that can be null without saying so."""

import re
from datetime import UTC, datetime

import pytest
import schemathesis
from django.core import signals
from django.core.exceptions import FieldDoesNotExist
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.urls import get_resolver
from rest_framework import serializers
from schemathesis.checks import response_schema_conformance

from alerting import alerts
from alerting import services as alerting_services
from alerting.models import AlertKind
from billing import price_changes as billing_price_changes
from console.services import create_api_token
from instances.models import GpuModel, Instance
from jobs import submission as job_submission

schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application())

READS = re.compile(r"^/api/v1/(alerts|alert-rules|instances|jobs)/")
OPERATIONS = [
    (path, method) for path, methods in schema.raw_schema["paths"].items() if READS.match(path)
    for method in methods if method == "get"
]


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def rows(acme_instance, launch, alice, bob, acme, ops, fleet, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_CLASSES": []}
    since = datetime(2000, 1, 1, tzinfo=UTC)
    billing_price_changes.set_price(actor="system", sku="H100-80GB", kind="idle", hourly="0.25", effective_from=since,
                               now=since)
    model = GpuModel.objects.get(name="H100-80GB")
    queued = job_submission.submit_job(actor=bob, team=acme, name="never-run", command="true", gpu_model=model,
                                     gpu_count=8, priority="low")
    cancelled = job_submission.submit_job(actor=bob, team=acme, name="cancelled", command="true", gpu_model=model,
                                        gpu_count=8, priority="low")
    job_submission.cancel_job(actor=bob, job=cancelled)
    rule = alerting_services.create_rule(actor=alice, team=acme, name="busy", metric="gpu_util", threshold=90,
                                           hold_s=5)
    fleet_alert = alerts.raise_alert(AlertKind.AUDIT, alerts.Condition(key="fleet-wide", message="somewhere"))
    team_alert = alerts.raise_alert(AlertKind.UTILIZATION, alerts.Condition(
        key=f"r{rule.pk}:x", message="busy", rule_id=rule.pk, team_id=acme.pk, instance_id=acme_instance.pk,
        value=97.0, threshold=90.0))
    pending = launch(bob, acme, name="waiting")
    spot = launch(bob, acme, name="spotty", pricing="spot", max_price="2.50")
    assert Instance.objects.get(pk=pending.pk).state == "pending"
    return {
        "instances": [acme_instance.pk, pending.pk, spot.pk],
        "jobs": [queued.pk, cancelled.pk],
        "alerts": [fleet_alert.pk, team_alert.pk],
        "alert-rules": [rule.pk],
        "tokens": [create_api_token(actor=who, user=who, name="contract")[1] for who in (ops, alice, bob)],
    }


def _cases(path, method, rows):
    operation = schema[path][method]
    kind = READS.match(path).group(1)
    names = re.findall(r"\{(\w+)\}", path)
    ids = rows[kind] if names else [None]
    for pk in ids:
        yield operation.Case(path_parameters={names[0]: pk} if names else {})


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "method"), OPERATIONS, ids=[f"{m.upper()} {p}" for p, m in OPERATIONS])
def test_reads_with_empty_optional_fields_match_the_schema(rows, path, method):
    checked = 0
    for case in _cases(path, method, rows):
        for token in rows["tokens"]:
            response = case.call(headers={"Authorization": f"Token {token}"})
            assert response.status_code < 500, (case.formatted_path, response.status_code)
            if response.status_code == 200:
                case.validate_response(response, checks=[response_schema_conformance])
                checked += 1
    assert checked, f"no 200 answer to check for {method.upper()} {path}"


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _may_be_null(model, source: str) -> bool:
    """Whether ``source`` (a dotted path from ``model``) can end in None: a nullable
    column or foreign key on the way, or a reverse one-to-one that may be absent."""
    for part in source.split("."):
        try:
            field = model._meta.get_field(part)
        except FieldDoesNotExist:  # a property or method: its own annotation speaks
            return False
        if getattr(field, "null", False) or (field.one_to_one and field.auto_created):
            return True
        if not field.is_relation:
            return False
        model = field.related_model
    return False


def test_every_field_that_can_be_null_says_so():
    assert get_resolver().url_patterns  # every app's serializers imported
    silent = []
    for cls in set(_subclasses(serializers.ModelSerializer)):
        if cls.__module__.startswith(("rest_framework", "drf_spectacular")) or not hasattr(cls, "Meta"):
            continue
        for name, field in cls().fields.items():
            if (field.write_only or field.source == "*" or getattr(field, "allow_null", False)
                    or isinstance(field, serializers.SerializerMethodField | serializers.ManyRelatedField
                                  | serializers.ListSerializer)):
                continue
            if _may_be_null(cls.Meta.model, field.source):
                silent.append(f"{cls.__module__}.{cls.__name__}.{name}")
    assert sorted(silent) == []
