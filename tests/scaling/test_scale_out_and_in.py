"""Through the API: a group goes from 1 to 4 instances when its queue grows and back to
1 when it empties, within its cooldowns, driven by the periodic task at chosen times."""

from datetime import timedelta

from django.utils import timezone

from alerting.models import Alert, AlertKind, AlertState
from audit.models import AuditEvent
from instances.models import Instance
from scaling import tasks
from scaling.models import ScalingDecision


def _push(client, group_id, depth):
    response = client.post(f"/api/v1/scaling-groups/{group_id}/metrics/", {"queue_depth": depth}, format="json")
    assert response.status_code == 200, response.content
    return response


def _tick(base, seconds):
    tasks.evaluate_groups(now=(base + timedelta(seconds=seconds)).isoformat())
    return ScalingDecision.objects.order_by("-time", "-id").first()


def test_it_scales_from_one_to_four_and_back(api, token, fleet, acme, bob):
    created = api(bob).post("/api/v1/scaling-groups/", {
        "team": acme.pk, "name": "workers", "gpu_model": "H100-80GB", "gpus_per_instance": 1,
        "min_instances": 1, "max_instances": 4, "target_per_instance": 10,
        "scale_out_cooldown_s": 60, "scale_in_cooldown_s": 120,
    }, format="json")
    assert created.status_code == 201, created.content
    gid = created.json()["id"]
    pusher = token(bob)
    base = timezone.now()

    _push(pusher, gid, 5)
    first = _tick(base, 1)
    assert (first.desired, first.running, first.action, first.reason) == (1, 1, "scale_out", "queue_depth"), first.message

    _push(pusher, gid, 35)
    waiting = _tick(base, 10)
    assert (waiting.desired, waiting.running, waiting.action, waiting.reason) == (4, 1, "none", "cooldown")

    grown = _tick(base, 62)
    assert (grown.desired, grown.running, grown.action, grown.changed) == (4, 4, "scale_out", 3)
    assert api(bob).get(f"/api/v1/scaling-groups/{gid}/").json()["running"] == 4

    _push(pusher, gid, 100)
    full = _tick(base, 130)
    assert (full.desired, full.running, full.action, full.reason) == (4, 4, "none", "at_max")
    alert = Alert.objects.get(kind=AlertKind.SCALING_AT_MAX)
    assert alert.team_id == acme.pk and "100 items queued" in alert.message

    _push(pusher, gid, 0)
    cooling = _tick(base, 140)
    assert (cooling.desired, cooling.running, cooling.reason) == (1, 4, "cooldown")
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED

    shrunk = _tick(base, 190)
    assert (shrunk.desired, shrunk.running, shrunk.action, shrunk.reason) == (1, 1, "scale_in", "at_min")
    assert "terminated workers-4, workers-3, workers-2" in shrunk.message
    assert sorted(Instance.objects.filter(state="terminated").values_list("name", flat=True)) == [
        "workers-2", "workers-3", "workers-4"]
    body = api(bob).get(f"/api/v1/scaling-groups/{gid}/").json()
    assert body["running"] == 1

    log = api(bob).get(f"/api/v1/scaling-groups/{gid}/decisions/").json()["results"]
    assert [d["reason"] for d in log] == ["at_min", "cooldown", "at_max", "queue_depth", "cooldown", "queue_depth"]
    audited = AuditEvent.objects.filter(action__startswith="scaling_group.scale").values_list("action", flat=True)
    assert sorted(audited) == ["scaling_group.scale_in", "scaling_group.scale_out", "scaling_group.scale_out"]
