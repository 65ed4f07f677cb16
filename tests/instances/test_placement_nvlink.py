"""An instance's GPUs all share one NVLink group where the host has groups; when no group
can hold the request, the error says so."""

import pytest

from instances import lifecycle, placement
from instances.models import Gpu, Host, HostKind, PreemptionNotice


@pytest.fixture
def pairs(fleet):
    """h200-pcie: 4 × H200 on PCIe, GPUs 0 and 1 bridged by NVLink (group pcie-a), GPUs 2
    and 3 in no group. (h200-a, the fleet's, holds 1 × H200 in its host-wide group.)"""
    host = Host.objects.create(name="h200-pcie", region=fleet["region"], kind=HostKind.PASSTHROUGH)
    for index, group in enumerate(["pcie-a", "pcie-a", "", ""]):
        Gpu.objects.create(host=host, index=index, uuid=f"GPU-pcie-{index}", model=fleet["h200"],
                           memory_total=141 * 1024**3, nvlink_group=group)
    return host


def test_two_gpus_land_in_one_nvlink_group(launch, bob, acme, pairs):
    instance = launch(bob, acme, model="H200-141GB", count=2)
    assert {g.nvlink_group for g in instance.gpus.all()} == {"pcie-a"}


def test_more_gpus_than_any_group_holds_is_refused_with_the_reason(launch, bob, acme, pairs):
    with pytest.raises(placement.PlacementError) as caught:
        launch(bob, acme, model="H200-141GB", count=3)
    assert str(caught.value) == (
        "No NVLink group can hold 3 H200-141GB GPUs: an instance's GPUs must share one NVLink group, and the most "
        "free in one group is 2 (host h200-pcie has 4 free, split across groups). Ask for at most 2, or try later.")


def test_a_gpu_in_no_group_on_a_grouped_host_takes_one_gpu_instances(launch, bob, acme, pairs):
    launch(bob, acme, name="one", model="H200-141GB", count=1)  # h200-a's single GPU
    single = launch(bob, acme, name="two", model="H200-141GB", count=1)
    assert [g.uuid for g in single.gpus.all()] == ["GPU-pcie-2"]  # a group of one before breaking a pair


def test_hosts_without_groups_still_place_across_the_host(launch, bob, acme, fleet):
    Host.objects.update(nvlink_group="")
    assert launch(bob, acme, count=8).gpus.count() == 8


def test_free_capacity_counts_what_one_instance_can_get(pairs, fleet):
    assert placement.free_capacity(gpu_model=fleet["h200"]) == (5, 2)


def test_the_api_names_the_nvlink_limit(api, bob, acme, pairs):
    body = {"team": acme.pk, "name": "big", "gpu_model": "H200-141GB", "gpu_count": 3, "pricing_model": "on_demand"}
    response = api(bob).post("/api/v1/instances/", body, format="json")
    assert response.status_code == 400
    assert response.json()["gpu_count"] == [
        "At most 2 H200-141GB GPUs share one NVLink group, and an instance's GPUs must; you asked for 3."]


def test_the_launch_form_shows_the_nvlink_reason(client, bob, acme, pairs):
    client.force_login(bob)
    response = client.post("/instances/new/", {"team": acme.pk, "name": "big", "gpu_model": "H200-141GB",
                                               "gpu_count": 3, "pricing_model": "on_demand"})
    assert response.status_code == 400
    assert "No NVLink group can hold 3 H200-141GB GPUs" in response.content.decode()


def test_the_launch_quote_says_it_does_not_fit(api, bob, pairs):
    quote = api(bob).get("/api/v1/launch-quote/?gpu_model=H200-141GB&gpu_count=3").json()
    assert (quote["free"], quote["free_on_one_host"], quote["fits"]) == (5, 2, False)


def test_making_room_preempts_spot_gpus_of_one_nvlink_group(launch, bob, acme, pairs):
    for name in "abcde":  # best fit: h200-a, the two GPUs in no group, then the pair
        lifecycle.mark_running(instance=launch(bob, acme, name=name, model="H200-141GB", pricing="spot"))
    with pytest.raises(placement.PlacementError, match="were given notice"):
        launch(bob, acme, name="big", model="H200-141GB", count=2)
    noticed = set(PreemptionNotice.objects.values_list("instance__name", flat=True))
    assert noticed == {"d", "e"}  # b and c free two GPUs, but in no shared group
