"""Energy from the counter's increases, exactly; facility energy and carbon from the
region's PUE and grid intensity, which only operators set."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from audit.models import AuditEvent
from monitoring.models import Rollup1m
from savings import energy
from savings.models import RegionFootprint

MJ_PER_KWH = 3.6e9

def test_energy_is_the_counters_increase(acme, metered):
    now = timezone.now()
    fp = energy.by_instance(acme.pk, now - timedelta(days=1), now)[metered.pk]
    rows = Rollup1m.objects.filter(instance=metered).order_by("bucket")
    increase = 0
    for gpu in {r.gpu_id for r in rows}:
        mine = [r for r in rows if r.gpu_id == gpu]
        increase += mine[-1].energy_mj_last - (mine[0].energy_mj_last - mine[0].energy_mj_delta)
    assert fp.it_kwh == pytest.approx(increase / MJ_PER_KWH, rel=0.001)
    assert fp.it_kwh == pytest.approx(2.7, rel=0.001)
    assert fp.kg_co2e is None  # no footprint set for the region


def test_carbon_uses_the_regions_pue_and_grid(ops, fleet, acme, metered):
    energy.set_footprint(actor=ops, region=fleet["region"], pue="1.20", grid_g_co2e_per_kwh="400")
    now = timezone.now()
    total = energy.team_total(acme.pk, now - timedelta(days=1), now)
    assert total.facility_kwh == pytest.approx(2.7 * 1.2, rel=0.001)
    assert total.kg_co2e == pytest.approx(2.7 * 1.2 * 0.4, rel=0.001)
    assert energy.by_instance(acme.pk, now - timedelta(days=1), now)[metered.pk].pue == 1.2
    assert AuditEvent.objects.filter(action="savings.footprint.set").count() == 1


def test_bad_footprints_are_named_and_write_nothing(ops, fleet):
    with pytest.raises(ValidationError) as raised:
        energy.set_footprint(actor=ops, region=fleet["region"], pue="0.9", grid_g_co2e_per_kwh="1e3")
    assert set(raised.value.message_dict) == {"pue", "grid_g_co2e_per_kwh"}
    assert not RegionFootprint.objects.exists()


def test_only_operators_set_footprints_and_teams_read_their_own_energy(alice, charlie, ops, fleet, acme, metered,
                                                                        api):
    body = {"region": fleet["region"].pk, "pue": "1.3", "grid_g_co2e_per_kwh": "250"}
    assert api(alice).post("/api/v1/region-footprints/", body, format="json").status_code == 403
    assert api(ops).post("/api/v1/region-footprints/", body, format="json").status_code == 201
    mine = api(alice).get(f"/api/v1/energy/?team={acme.pk}").json()
    assert mine["total"]["it_kwh"] == pytest.approx(2.7, rel=0.001)
    assert mine["total"]["kg_co2e"] == pytest.approx(2.7 * 1.3 * 0.25, rel=0.001)
    assert api(charlie).get(f"/api/v1/energy/?team={acme.pk}").status_code == 404
    assert "team" in api(alice).get("/api/v1/energy/").json()


def test_a_jobs_energy_is_its_runs_instances(acme, metered, fleet):
    from jobs.models import Job, JobRun

    job = Job.objects.create(team=acme, name="sweep", command="python train.py", gpu_model=fleet["h100"],
                             gpu_count=2, queue_key=1)
    JobRun.objects.create(job=job, instance=metered, started_at=timezone.now() - timedelta(hours=2))
    now = timezone.now()
    jobs = energy.by_job(energy.by_instance(acme.pk, now - timedelta(days=1), now))
    assert jobs[job.pk].it_kwh == pytest.approx(2.7, rel=0.001)
