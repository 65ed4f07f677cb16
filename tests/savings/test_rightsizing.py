"""Each kind of advice, from telemetry written for the purpose, priced by billing."""

from decimal import Decimal

from instances.models import Instance
from savings import services


def _advice(team):
    return {r.instance.name: r for r in services.recommendations(Instance.objects.filter(team=team))}


def test_a_small_workload_on_a_whole_gpu_gets_a_mig_slice(alice, acme, running, telemetry):
    telemetry(running(alice, acme, "notebook"), mem_gb=6, activity=8)
    rec = _advice(acme)["notebook"]
    assert (rec.kind, rec.proposed_sku, rec.proposed_count) == ("slice", "H100-80GB:mig:1g.10gb", 1)
    assert rec.monthly_saving == Decimal("1825.00")  # 730 h × (3.00 − 0.50)
    assert "MIG" in rec.risk


def test_four_gpus_used_like_two_get_fewer_gpus(alice, acme, running, telemetry):
    telemetry(running(alice, acme, "serve", count=4), mem_gb=30, activity=20)
    rec = _advice(acme)["serve"]
    assert (rec.kind, rec.proposed_sku, rec.proposed_count) == ("fewer", "H100-80GB", 2)
    assert rec.monthly_saving == Decimal("4380.00")  # 730 h × 2 × 3.00


def test_an_idle_instance_holding_memory_is_advised_to_stop(alice, acme, running, telemetry):
    telemetry(running(alice, acme, "held"), mem_gb=70, activity=0, dram=1)
    rec = _advice(acme)["held"]
    assert (rec.kind, rec.proposed_per_hour) == ("stop", Decimal(0))
    assert rec.monthly_saving == Decimal("2190.00")
    assert "idle by real activity" in rec.reason


def test_a_busy_instance_gets_no_advice(alice, acme, running, telemetry):
    telemetry(running(alice, acme, "train"), mem_gb=70, activity=85)
    assert "train" not in _advice(acme)


def test_a_memory_copy_at_full_dram_bandwidth_is_not_idle(alice, acme, running, telemetry):
    telemetry(running(alice, acme, "copy"), mem_gb=70, activity=0, dram=95)
    assert "copy" not in _advice(acme)


def test_a_device_that_reports_no_activity_is_not_advised_to_stop(alice, acme, running, telemetry):
    # An A100's MIG slice reports its memory only: how busy it is is unknown, not 0%.
    telemetry(running(alice, acme, "blind"), mem_gb=5, activity=None)
    assert "blind" not in _advice(acme)


def test_less_than_an_hour_of_telemetry_gives_no_advice(alice, acme, running, telemetry):
    telemetry(running(alice, acme, "new"), minutes=30, mem_gb=6, activity=8)
    assert "new" not in _advice(acme)


def test_a_snoozed_recommendation_is_set_aside_until_it_ends(alice, acme, running, telemetry):
    instance = running(alice, acme, "held")
    telemetry(instance, mem_gb=70, activity=0)
    services.dismiss(actor=alice, instance=instance, kind="stop", days=7)
    assert _advice(acme)["held"].dismissal.until is not None
    services.restore(actor=alice, instance=instance, kind="stop")
    assert _advice(acme)["held"].dismissal is None



def _catalog_reads(queries) -> int:
    tables = ('"instances_gpumodel"', '"instances_sliceprofile"')
    return sum(1 for q in queries if q["sql"].split(" FROM ", 1)[-1].startswith(tables))


def test_the_catalog_is_read_once_for_many_instances(alice, acme, running, telemetry):
    """Shapes come from one read of the GPU models and slice profiles, not one per instance."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    telemetry(running(alice, acme, "one"), mem_gb=6, activity=8)
    with CaptureQueriesContext(connection) as one:
        _advice(acme)
    for name in ("two", "three", "four"):
        telemetry(running(alice, acme, name), mem_gb=6, activity=8)
    with CaptureQueriesContext(connection) as four:
        assert len(_advice(acme)) == 4
    assert _catalog_reads(four.captured_queries) == _catalog_reads(one.captured_queries) > 0
