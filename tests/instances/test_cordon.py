import pytest

from audit.models import AuditEvent
from instances import cordon, placement
from instances.models import Gpu, Host


def test_a_cordoned_host_gets_no_new_instances(launch, bob, acme, ops, fleet):
    cordon.cordon_host(actor=ops, host=fleet["hosts"]["h100-a"], reason="fan noise")
    instance = launch(bob, acme, count=8)
    assert instance.host.name == "h100-b"
    with pytest.raises(placement.PlacementError):
        launch(bob, acme, name="b", count=1)


def test_a_cordoned_gpu_is_not_placed_and_not_counted_free(launch, bob, acme, ops, fleet):
    gpu = Gpu.objects.get(uuid="GPU-h200-a-0")
    cordon.cordon_gpu(actor=ops, gpu=gpu, reason="XID 79")
    assert placement.free_capacity(gpu_model=fleet["h200"]) == (0, 0)
    with pytest.raises(placement.PlacementError):
        launch(bob, acme, model="H200-141GB", count=1)


def test_uncordon_gives_the_gpu_back_to_placement(launch, bob, acme, ops, fleet):
    gpu = cordon.cordon_gpu(actor=ops, gpu=Gpu.objects.get(uuid="GPU-h200-a-0"))
    cordon.uncordon_gpu(actor=ops, gpu=gpu)
    assert launch(bob, acme, model="H200-141GB", count=1).host.name == "h200-a"


def test_cordoned_mig_host_offers_no_slices(launch, bob, acme, ops, fleet):
    cordon.cordon_host(actor=ops, host=fleet["hosts"]["a100-mig"])
    assert placement.free_capacity(gpu_model=fleet["a100"], slice_profile=fleet["mig"]) == (0, 0)


def test_cordon_and_uncordon_are_audited_once(ops, fleet):
    host = fleet["hosts"]["h100-a"]
    cordon.cordon_host(actor=ops, host=host, reason="rack work")
    cordon.cordon_host(actor=ops, host=host, reason="again")
    cordon.uncordon_host(actor=ops, host=host)
    actions = list(AuditEvent.objects.filter(action__startswith="host.").values_list("action", flat=True))
    assert sorted(actions) == ["host.cordon", "host.uncordon"]


def test_a_too_long_reason_is_refused_and_nothing_changes(ops, fleet):
    with pytest.raises(cordon.CordonError):
        cordon.cordon_host(actor=ops, host=fleet["hosts"]["h100-a"], reason="x" * 301)
    assert Host.objects.get(name="h100-a").cordoned_at is None


def test_the_launch_form_counts_no_cordoned_gpu_and_says_so(client, bob, ops, fleet):
    cordon.cordon_gpu(actor=ops, gpu=Gpu.objects.get(uuid="GPU-h200-a-0"), reason="XID 79")
    client.force_login(bob)
    page = client.get("/instances/new/").content.decode()
    assert 'data-free="H200-141GB">0<' in page
    assert "1 GPU held out for maintenance is not counted" in page
    assert "XID 79" not in page
