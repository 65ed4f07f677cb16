import pytest

from instances import lifecycle, placement
from instances.models import Gpu, Host


def test_all_gpus_land_on_one_host(launch, bob, acme):
    instance = launch(bob, acme, count=8)
    hosts = set(Gpu.objects.filter(instance=instance).values_list("host__name", flat=True))
    assert len(hosts) == 1


def test_fullest_host_that_fits_wins(launch, bob, acme):
    first = launch(bob, acme, name="a", count=6)
    second = launch(bob, acme, name="b", count=2)
    assert second.host == first.host


def test_no_capacity_names_the_reason(launch, bob, acme):
    launch(bob, acme, name="a", count=8)
    launch(bob, acme, name="b", count=8)
    with pytest.raises(placement.PlacementError, match="no active host has 1 free H100-80GB GPUs"):
        launch(bob, acme, name="c", count=1)


def test_draining_hosts_get_no_new_instances(launch, bob, acme, fleet):
    Host.objects.filter(name="h100-a").update(state="draining")
    instance = launch(bob, acme, count=8)
    assert instance.host.name == "h100-b"


def test_mig_slices_are_placed_on_a_mig_host(launch, bob, acme, fleet):
    instance = launch(bob, acme, model="A100-80GB", count=3, slice_profile=fleet["mig"])
    assert instance.host.name == "a100-mig"
    assert instance.slices.count() == 3


def test_whole_gpus_never_come_from_a_mig_host(launch, bob, acme):
    with pytest.raises(placement.PlacementError):
        launch(bob, acme, model="A100-80GB", count=1)


def test_a_failed_placement_leaves_nothing_behind(launch, bob, acme):
    from instances.models import Instance

    with pytest.raises(placement.PlacementError):
        launch(bob, acme, model="H200-141GB", count=2)
    assert not Instance.objects.exists()


def test_restart_fails_with_a_reason_when_capacity_is_gone(launch, bob, acme):
    job = lifecycle.mark_running(instance=launch(bob, acme, name="a", count=8))
    lifecycle.stop_instance(actor=bob, instance=job, finish=False)
    lifecycle.finish_stop(instance=job)
    launch(bob, acme, name="b", count=8)
    launch(bob, acme, name="c", count=8)
    with pytest.raises(placement.PlacementError, match="No capacity"):
        lifecycle.start_instance(actor=bob, instance=job)


def test_short_on_demand_capacity_gives_spot_instances_notice(launch, bob, alice, acme):
    from instances.models import PreemptionNotice

    for n in range(2):
        lifecycle.mark_running(instance=launch(alice, acme, name=f"spot-{n}", count=8, pricing="spot"))
    with pytest.raises(placement.PlacementError, match="were given notice to make room"):
        launch(bob, acme, name="urgent", count=4)
    noticed = PreemptionNotice.objects.get()
    assert noticed.instance.name.startswith("spot-") and noticed.status == "pending"


def test_spot_launches_never_preempt_other_spot(launch, bob, acme):
    from instances.models import PreemptionNotice

    for n in range(2):
        lifecycle.mark_running(instance=launch(bob, acme, name=f"spot-{n}", count=8, pricing="spot"))
    with pytest.raises(placement.PlacementError):
        launch(bob, acme, name="more-spot", count=1, pricing="spot")
    assert not PreemptionNotice.objects.exists()


def test_a_second_launch_short_of_the_same_room_preempts_nothing_more(launch, bob, alice, acme):
    from instances.models import PreemptionNotice

    for n in range(2):
        lifecycle.mark_running(instance=launch(alice, acme, name=f"spot-{n}", count=8, pricing="spot"))
    for name in ("urgent", "also-urgent"):
        with pytest.raises(placement.PlacementError):
            launch(bob, acme, name=name, count=4)
    assert PreemptionNotice.objects.count() == 1
