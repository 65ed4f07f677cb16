"""A scaling group made, changed and deleted from its pages, the API's DELETE, and the
list's cost of queries."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent
from instances.models import Instance
from scaling import services
from scaling.charts import history_figure
from scaling.models import ScalingDecision, ScalingGroup

FORM = {"team": "", "name": "farm", "gpu_model": "H100-80GB", "gpus_per_instance": "1", "image": "",
        "pricing_model": "on_demand", "max_price": "", "min_instances": "1", "max_instances": "3",
        "metric_source": "pushed", "target_per_instance": "10", "scale_out_cooldown_s": "60",
        "scale_in_cooldown_s": "120"}


def _grow(group, depth=30):
    services.push_queue_depth(group=group, queue_depth=depth)
    return services.evaluate_group(group, provision=False)


def test_a_member_creates_and_edits_a_group_from_the_form(client, fleet, acme, bob):
    client.force_login(bob)
    assert client.get("/scaling-groups/").content.count(b'id="new-group"') == 1
    assert client.get("/scaling-groups/new/").status_code == 200
    response = client.post("/scaling-groups/new/", {**FORM, "team": acme.pk})
    group = ScalingGroup.objects.get(name="farm")
    assert response.status_code == 302 and response["Location"] == f"/scaling-groups/{group.pk}/"
    assert (group.team, group.max_instances, group.created_by) == (acme, 3, bob)

    page = client.get(f"/scaling-groups/{group.pk}/edit/")
    assert b'value="farm"' in page.content and b"disabled" in page.content
    response = client.post(f"/scaling-groups/{group.pk}/edit/", {**FORM, "team": acme.pk, "name": "renamed",
                                                                   "max_instances": "6"})
    assert response.status_code == 302
    group.refresh_from_db()
    assert (group.name, group.max_instances) == ("farm", 6)  # the name stays
    changed = AuditEvent.objects.get(action="scaling_group.update")
    assert changed.details["changed"] == {"max_instances": {"from": 3, "to": 6}}


@pytest.mark.parametrize("change, field, text", [
    ({"min_instances": "5", "max_instances": "2"}, "min_instances", "above the maximum"),
    ({"max_price": "1.00"}, "max_price", "spot groups only"),
    ({"max_instances": "65"}, "max_instances", "between 1 and 64"),
    ({"gpus_per_instance": "x"}, "gpus_per_instance", "whole number"),
    ({"gpu_model": "Z9"}, "gpu_model", "valid choice"),
])
def test_the_form_names_each_bad_field_and_creates_nothing(client, fleet, acme, bob, change, field, text):
    client.force_login(bob)
    response = client.post("/scaling-groups/new/", {**FORM, "team": acme.pk, **change})
    assert response.status_code == 400
    assert text in " ".join(response.context["form"].errors[field])
    assert not ScalingGroup.objects.exists()


def test_an_auditor_may_not_create_change_or_delete(client, group, audrey):
    client.force_login(audrey)
    assert client.get("/scaling-groups/new/").status_code == 403
    assert client.get(f"/scaling-groups/{group.pk}/edit/").status_code == 403
    assert client.post(f"/scaling-groups/{group.pk}/delete/").status_code == 403
    page = client.get(f"/scaling-groups/{group.pk}/").content
    assert b'id="edit-group"' not in page and b'id="delete-group"' not in page
    assert ScalingGroup.objects.live().count() == 1


def test_deleting_terminates_its_instances_and_keeps_its_costs(api, group, acme, alice):
    _grow(group)
    ids = list(Instance.objects.filter(scaling_member__group=group).values_list("pk", flat=True))
    assert len(ids) == 3
    response = api(alice).delete(f"/api/v1/scaling-groups/{group.pk}/")
    assert response.status_code == 204, response.content
    assert set(Instance.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"terminated"}
    event = AuditEvent.objects.get(action="scaling_group.delete")
    assert sorted(event.details["terminated"]) == ["workers-1", "workers-2", "workers-3"]
    assert api(alice).get(f"/api/v1/scaling-groups/{group.pk}/").status_code == 404
    assert api(alice).get("/api/v1/scaling-groups/").json()["count"] == 0
    assert services.evaluate_all() == []  # no longer evaluated
    assert api(alice).delete(f"/api/v1/scaling-groups/{group.pk}/").status_code == 404
    # the name is free again; the old row stays for the cost explorer
    again = services.create_group(actor=alice, team=acme, name="workers", gpu_model=group.gpu_model,
                                  gpus_per_instance=1, max_instances=2, target_per_instance=10)
    assert again.pk != group.pk and ScalingGroup.objects.filter(name="workers").count() == 2
    assert set(Instance.objects.filter(pk__in=ids).values_list("scaling_member__group__name", flat=True)) == {"workers"}


def test_the_page_deletes_after_confirming(client, group, bob):
    _grow(group, depth=15)
    client.force_login(bob)
    page = client.get(f"/scaling-groups/{group.pk}/").content.decode()
    assert 'id="delete-group"' in page and "terminate its 2 instances" in page
    response = client.post(f"/scaling-groups/{group.pk}/delete/", follow=True)
    assert response.redirect_chain[-1][0] == "/scaling-groups/"
    assert "deleted; its instances were terminated (workers-2, workers-1)" in response.content.decode()
    assert client.get(f"/scaling-groups/{group.pk}/").status_code == 404
    assert client.get("/scaling-groups/").content.count(b"data-group=") == 0


def test_a_deleted_group_takes_no_pushes_or_changes(group, bob):
    services.delete_group(actor=bob, group=group)
    for call in (lambda: services.push_queue_depth(group=group, queue_depth=3),
                 lambda: services.update_group(actor=bob, group=group, max_instances=2)):
        with pytest.raises(Exception, match="was deleted"):
            call()


def test_the_api_list_costs_the_same_queries_for_one_group_or_many(api, fleet, acme, alice):
    def queries():
        with CaptureQueriesContext(connection) as seen:
            assert api(alice).get("/api/v1/scaling-groups/").status_code == 200
        return len(seen)

    first = services.create_group(actor=alice, team=acme, name="g0", gpu_model=fleet["h100"], gpus_per_instance=1,
                                  max_instances=2, target_per_instance=10)
    _grow(first, depth=5)
    one = queries()
    for n in range(1, 6):
        g = services.create_group(actor=alice, team=acme, name=f"g{n}", gpu_model=fleet["h100"],
                                  gpus_per_instance=1, max_instances=2, target_per_instance=10)
        _grow(g, depth=5)
    body = api(alice).get("/api/v1/scaling-groups/").json()
    assert [r["running"] for r in body["results"]] == [1] * 6
    assert queries() == one


def test_the_list_page_costs_the_same_queries_for_one_group_or_many(client, fleet, acme, alice):
    client.force_login(alice)

    def queries():
        with CaptureQueriesContext(connection) as seen:
            assert client.get("/scaling-groups/").status_code == 200
        return len(seen)

    groups = [services.create_group(actor=alice, team=acme, name="g0", gpu_model=fleet["h100"], gpus_per_instance=1,
                                    max_instances=2, target_per_instance=10)]
    _grow(groups[0], depth=5)
    one = queries()
    for n in range(1, 6):
        groups.append(services.create_group(actor=alice, team=acme, name=f"g{n}", gpu_model=fleet["h100"],
                                            gpus_per_instance=1, max_instances=2, target_per_instance=10))
        _grow(groups[-1], depth=5)
    assert queries() == one
    latest = services.latest_decisions(groups)
    assert {g.pk: latest[g.pk] for g in groups} == {g.pk: g.decisions.first() for g in groups}


def test_the_chart_runs_to_now():
    t0 = datetime(2026, 12, 3, 10, tzinfo=UTC)
    rows = [ScalingDecision(pk=1, time=t0, queue_depth=30, desired=3, running=3, action="scale_out",
                            reason="queue_depth")]
    end = t0 + timedelta(minutes=40)
    figure = history_figure(rows, start=t0 - timedelta(hours=1), end=end)
    running = figure["data"][1]
    assert running["y"] == [3, 3] and running["x"][-1] == "2026-12-03 10:40:00.000"
    assert figure["layout"]["xaxis"]["range"] == ["2026-12-03 09:00:00.000", "2026-12-03 10:40:00.000"]
