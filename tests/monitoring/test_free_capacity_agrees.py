"""Free GPUs are counted once (``gpu_free_q``): the fleet page, the overview API and the
launch form agree per model; GPUs in MIG/vGPU mode and GPUs of a draining host are not
free whole GPUs, however idle."""

import re

from instances import placement
from instances.models import Host, HostState


def fleet_free(page: str) -> dict[str, int]:
    return {m: int(n) for m, n in re.findall(r'data-free="([^"]+)">(\d+)<', page)}


def launch_free(page: str) -> dict[str, int]:
    return {sku: n for sku, n in fleet_free(page).items() if ":" not in sku}  # whole GPUs, not slices


def test_the_fleet_page_and_the_launch_form_count_the_same_free_gpus(client, ops, acme_instance, fleet):
    Host.objects.filter(name="h100-b").update(state=HostState.DRAINING)
    client.force_login(ops)
    fleet_page = client.get("/").content.decode()
    form = client.get("/instances/new/").content.decode()
    # h100-a: 8, 2 held by acme-train; h100-b draining; a100-mig in MIG mode; h200-a free.
    assert fleet_free(fleet_page) == launch_free(form) == {"A100-80GB": 0, "H100-80GB": 6, "H200-141GB": 1}
    api = {r["model"]: r for r in client.get("/api/v1/overview/").json()["capacity"]}
    assert {m: r["free"] for m, r in api.items()} == fleet_free(fleet_page)
    assert (api["A100-80GB"]["other"], api["H100-80GB"]["other"]) == (2, 8)
    assert placement.free_capacity(gpu_model=fleet["h100"]) == (6, 6)


def test_every_gpu_is_used_free_or_other(client, ops, acme_instance):
    client.force_login(ops)
    for row in client.get("/api/v1/overview/").json()["capacity"]:
        assert row["used"] + row["free"] + row["other"] == row["total"]
