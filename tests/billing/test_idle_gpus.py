from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing import meter_runs
from monitoring.models import Rollup1m


@pytest.fixture
def half_idle(play, bob, acme, ops):
    """A 2 × H100 instance running for 3 hours: gpu0 busy, gpu1 idle the whole time."""
    now = timezone.now().replace(second=0, microsecond=0)
    start = now - timedelta(hours=3)
    job = play(bob, acme, runs=[(start, None, "")], count=2)
    gpus = list(job.gpus.order_by("index"))
    rows = []
    for minute in range(180):
        for gpu, util in ((gpus[0], 95.0), (gpus[1], 0.0)):
            rows.append(Rollup1m(gpu=gpu, instance=job, team=acme, bucket=start + timedelta(minutes=minute),
                                 samples=60, observed_s=60.0, gpu_util_avg=util))
    Rollup1m.objects.bulk_create(rows)
    meter_runs.meter_window(actor=ops, start=start, end=now, now=now)
    return job, gpus


def test_a_busy_instance_shows_its_idle_gpu_billed_now(half_idle, api, alice):
    job, gpus = half_idle
    body = api(alice).get("/api/v1/costs/idle-gpus/").json()
    assert [(g["gpu"], g["price_per_hour"], g["idle_pct_last_hour"]) for g in body["idle_billed_now"]] == [
        (gpus[1].uuid, "2.00", "100.0")
    ]


def test_idle_cost_per_gpu_is_its_share_times_its_idle_time(half_idle, api, alice):
    job, gpus = half_idle
    rows = {g["gpu"]: g for g in api(alice).get("/api/v1/costs/idle-gpus/").json()["by_gpu"]}
    assert Decimal(rows[gpus[1].uuid]["idle_cost"]) == Decimal(rows[gpus[1].uuid]["cost"]) > 0
    assert rows[gpus[0].uuid]["idle_cost"] == "0.00"


def test_other_teams_see_none_of_it_and_operators_see_the_fleet(half_idle, api, charlie, ops):
    assert api(charlie).get("/api/v1/costs/idle-gpus/").json()["idle_billed_now"] == []
    assert len(api(ops).get("/api/v1/costs/idle-gpus/").json()["idle_billed_now"]) == 1


def test_the_cost_explorer_lists_idle_gpus(half_idle, client, alice):
    client.force_login(alice)
    page = client.get("/costs/").content.decode()
    assert 'id="idle-now"' in page and half_idle[1][1].uuid in page


def test_the_cost_explorer_says_when_it_lists_only_the_most_idle_gpus(half_idle, client, alice, monkeypatch):
    from billing import views

    job, gpus = half_idle
    client.force_login(alice)
    whole = client.get("/costs/").content.decode()
    assert 'id="idle-by-gpu-cut"' not in whole
    monkeypatch.setattr(views, "IDLE_GPU_ROWS", 1)
    cut = client.get("/costs/").content.decode()
    table = cut.split('id="idle-by-gpu"')[1].split("</table>")[0]
    assert gpus[1].uuid in table and gpus[0].uuid not in table
    assert "listed, of 2; the other 1 add 0.00" in cut


def test_a_gpu_launched_minutes_ago_is_not_called_idle_for_the_hour(half_idle, play, bob, acme, ops, api, alice):
    now = timezone.now().replace(second=0, microsecond=0)
    fresh = play(bob, acme, runs=[(now - timedelta(minutes=3), None, "")])
    gpu = fresh.gpus.get()
    Rollup1m.objects.bulk_create([Rollup1m(gpu=gpu, instance=fresh, team=acme, bucket=now - timedelta(minutes=m),
                                           samples=60, observed_s=60.0, gpu_util_avg=0.0) for m in (1, 2)])
    meter_runs.meter_window(actor=ops, start=now - timedelta(hours=1), end=now, now=now)
    listed = [g["gpu"] for g in api(alice).get("/api/v1/costs/idle-gpus/").json()["idle_billed_now"]]
    assert gpu.uuid not in listed and half_idle[1][1].uuid in listed
