"""Ingest keeps its alert rules until one changes: every change of a rule (through the
service, the API, a cascade) replaces the rules' version once committed, and the next
stored frame reads the rules again; frames between changes read no rule at all."""

from datetime import timedelta

import pytest
from alert_support import Feed, active
from django.core.cache import cache
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from alerting import alerts, rule_cache, services, watch
from alerting.models import Alert, AlertRule
from console.models import Team
from instances import lifecycle as instance_lifecycle


@pytest.fixture(autouse=True)
def _shared_cache_interval(settings):
    """As with a cache every process shares (Redis): the safety re-read is a long way off."""
    settings.ALERT_RULES_MAX_AGE_S = 300


def test_the_safety_interval_follows_the_cache(settings):
    del settings.ALERT_RULES_MAX_AGE_S
    assert alerts.thresholds()["rules_max_age_s"] == (300 if rule_cache.shared() else 5)
    shared_backend = "django.core.cache.backends.redis.RedisCache"
    assert rule_cache.shared() == (settings.CACHES["default"]["BACKEND"] == shared_backend)


@pytest.fixture
def acme_instance(launch, bob, acme):
    began = timezone.now() - timedelta(hours=1)
    return instance_lifecycle.mark_running(instance=launch(bob, acme, name="acme-train", count=2, at=began), at=began)


@pytest.fixture
def gpu(acme_instance):
    return acme_instance.gpus.order_by("index").first()


class Clock:
    """Readings one second apart, ten minutes ago, through one connection."""

    def __init__(self, gpu):
        self.gpu, self.feed, self.t = gpu, Feed(gpu.host), timezone.now().timestamp() - 600

    def read(self, n: int = 1, **m) -> None:
        self.feed.readings(self.gpu, self.t, [m or {"gpu_util": 50}] * n)
        self.t += n


@pytest.fixture
def clock(gpu):
    return Clock(gpu)


def rule_queries(queries) -> int:
    return sum("monitoring_alertrule" in q["sql"] for q in queries.captured_queries)


def mine(rule) -> list[Alert]:
    return active(key__startswith=f"r{rule.pk}:")


def test_a_rule_made_edited_disabled_enabled_and_deleted_applies_on_the_next_frame(
        clock, alice, acme, django_capture_on_commit_callbacks):
    clock.read(gpu_util=95)  # the connection has read its rules
    with django_capture_on_commit_callbacks(execute=True):
        rule = services.create_rule(actor=alice, team=acme, name="busy", metric="gpu_util", threshold=99, hold_s=0)
    clock.read(gpu_util=95)
    assert mine(rule) == []
    with django_capture_on_commit_callbacks(execute=True):
        services.update_rule(actor=alice, rule=rule, threshold=90)
    clock.read(gpu_util=95)
    [alert] = mine(rule)
    assert alert.threshold == 90
    with django_capture_on_commit_callbacks(execute=True):
        services.update_rule(actor=alice, rule=rule, enabled=False)
    clock.read(gpu_util=95)
    assert mine(rule) == []
    assert Alert.objects.get(pk=alert.pk).state == "resolved"
    with django_capture_on_commit_callbacks(execute=True):
        services.update_rule(actor=alice, rule=rule, enabled=True)
    clock.read(gpu_util=95)
    assert len(mine(rule)) == 1
    deleted = AlertRule(pk=rule.pk)
    with django_capture_on_commit_callbacks(execute=True):
        services.delete_rule(actor=alice, rule=rule)
    clock.read(3, gpu_util=95)  # the deleted rule opens nothing more
    assert mine(deleted) == []


def test_a_rule_made_edited_and_deleted_through_the_api_applies_on_the_next_frame(
        clock, api, alice, acme, django_capture_on_commit_callbacks):
    clock.read(gpu_util=95)
    body = {"team": acme.pk, "name": "busy", "metric": "gpu_util", "comparison": ">=", "threshold": 90, "hold_s": 0}
    with django_capture_on_commit_callbacks(execute=True):
        response = api(alice).post("/api/v1/alert-rules/", body, format="json")
    assert response.status_code == 201, response.json()
    rule = AlertRule.objects.get(pk=response.json()["id"])
    clock.read(gpu_util=95)
    assert len(mine(rule)) == 1
    with django_capture_on_commit_callbacks(execute=True):
        assert api(alice).patch(f"/api/v1/alert-rules/{rule.pk}/", {"enabled": False}, format="json").status_code == 200
    clock.read(gpu_util=95)
    assert mine(rule) == []
    with django_capture_on_commit_callbacks(execute=True):
        assert api(alice).patch(f"/api/v1/alert-rules/{rule.pk}/", {"enabled": True, "threshold": 99},
                                format="json").status_code == 200
    clock.read(gpu_util=95)
    assert mine(rule) == []  # enabled again, but 95 is under the new threshold
    clock.read(gpu_util=99.5)
    assert len(mine(rule)) == 1
    with django_capture_on_commit_callbacks(execute=True):
        assert api(alice).delete(f"/api/v1/alert-rules/{rule.pk}/").status_code == 204
    clock.read(3, gpu_util=99.5)
    assert mine(rule) == []


def test_frames_read_no_rule_while_nothing_changed(clock, alice, acme):
    clock.read()
    watch = clock.feed.link.watch
    with CaptureQueriesContext(connection) as frames:
        for _ in range(5):
            watch.loaded_at -= 30  # half a minute between frames is no reason to read them again
            clock.read(gpu_util=95)
    assert rule_queries(frames) == 0 and len(frames.captured_queries) > 0


def test_a_change_re_reads_once_then_no_more(clock, alice, acme, django_capture_on_commit_callbacks):
    clock.read()
    with django_capture_on_commit_callbacks(execute=True):
        services.update_rule(actor=alice, rule=AlertRule.objects.get(team=acme, metric="temp_c"), threshold=80)
    with CaptureQueriesContext(connection) as first:
        clock.read()
    with CaptureQueriesContext(connection) as rest:
        clock.read(4)
    assert (rule_queries(first), rule_queries(rest)) == (1, 0)


def test_an_uncommitted_change_does_not_reach_ingest(clock, alice, acme, django_capture_on_commit_callbacks):
    clock.read()
    before = rule_cache.version()
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
        with transaction.atomic():
            services.create_rule(actor=alice, team=acme, name="busy", metric="gpu_util", threshold=90, hold_s=0)
            raise RuntimeError("rolled back")
    assert rule_cache.version() == before


def test_a_change_without_signals_applies_once_the_version_is_lost(clock, acme):
    """``QuerySet.update`` sends no signal; a flushed cache (no version) re-reads anyway."""
    clock.read(temp_c=91)
    AlertRule.objects.filter(team=acme, metric="temp_c").update(hold_s=0)
    clock.read(temp_c=91)
    assert active(rule__team=acme, kind="temperature") == []  # still the 60 s hold: nothing told ingest
    cache.clear()
    clock.read(temp_c=91)
    assert len(active(rule__team=acme, kind="temperature")) == 1


def test_an_unannounced_change_applies_after_the_safety_interval(clock, acme, settings):
    clock.read(temp_c=91)
    AlertRule.objects.filter(team=acme, metric="temp_c").update(hold_s=0)
    settings.ALERT_RULES_MAX_AGE_S = 0
    clock.read(temp_c=91)
    assert len(active(rule__team=acme, kind="temperature")) == 1


def test_cascades_and_default_rules_change_the_version(fleet, ops, django_capture_on_commit_callbacks):
    before = rule_cache.version()
    with django_capture_on_commit_callbacks(execute=True):
        team = Team.objects.create(name="Initech", slug="initech")  # its default rules (bulk_create)
    assert AlertRule.objects.filter(team=team).exists()
    made = rule_cache.version()
    assert made != before
    team_id = team.pk
    with django_capture_on_commit_callbacks(execute=True):
        team.delete()
    assert not AlertRule.objects.filter(team_id=team_id).exists()
    assert rule_cache.version() != made


def test_one_flush_reads_the_version_once_for_every_connection(fleet, monkeypatch):
    feeds = [Feed(h) for h in fleet["hosts"].values()]
    reads = []
    real = rule_cache.version
    monkeypatch.setattr(rule_cache, "version", lambda: reads.append(1) or real())
    items = [(f.link.watch, f.link.devices(), set()) for f in feeds]
    watch.load_many(items)
    watch.load_many(items)
    assert len(reads) == 2 and len(feeds) > 1


def test_a_new_precision_applies_to_tflops_rules_on_the_next_frame(clock, acme_instance, alice, acme,
                                                                      django_capture_on_commit_callbacks):
    rule = services.create_rule(actor=alice, team=acme, name="slow", metric="tflops_est", comparison="<",
                                threshold=100, hold_s=0)
    busy = {"tensor_active_pct": 8, "sm_clock_mhz": 1980}  # bf16: 0.08 × 989.4 × 0.98 ≈ 77.6 TFLOP/s
    clock.read(**busy)
    assert [a.value for a in active(rule=rule)] == [pytest.approx(77.57, abs=0.1)]
    with django_capture_on_commit_callbacks(execute=True):
        instance_lifecycle.set_precision(actor=alice, instance=acme_instance, precision="fp8")
    clock.read(**busy)  # fp8's peak is twice bf16's: ≈ 155 TFLOP/s, no longer under 100
    assert active(rule=rule) == []


def test_a_device_whose_model_changed_reads_its_rules_again():
    from monitoring.ingest import Device

    found = watch.Watch(host_id=1, host_name="h")
    before = {"GPU-a": Device("GPU-a", 1, None, 0, model_id=1)}
    found._assign(before, frozenset(), [], "v1")
    assert found._due(dict(before), set(), "v1", 300) is None  # an equal list: nothing to read
    after = {"GPU-a": Device("GPU-a", 1, None, 0, model_id=2)}
    assert found._due(after, set(), "v1", 300) is not None


def test_an_unreachable_redis_costs_a_flush_at_most_a_short_timeout(settings, monkeypatch):
    import time as clock_time

    settings.REDIS_URL = "redis://127.0.0.1:9/0"  # nothing listens there
    monkeypatch.setattr(rule_cache, "_client", None)
    monkeypatch.setattr(rule_cache, "_down_until", 0.0)
    started = clock_time.monotonic()
    first = rule_cache.version()
    assert clock_time.monotonic() - started < rule_cache.READ_TIMEOUT_S * 4
    monkeypatch.setattr(rule_cache, "_redis", lambda: pytest.fail("asked again during the back-off"))
    assert rule_cache.version() != first  # a fresh token: the rules are read from the database
