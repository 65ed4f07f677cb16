"""Hosts whose GPUs are bridged in pairs name their NVLink groups on the hosts list and
the host page, so "at most 2 for one instance" is explained; a host with one group for
all its GPUs names that group."""

from instances.models import Gpu, nvlink_groups, nvlink_text


def pair_up(host):
    host.nvlink_group = ""
    host.save(update_fields=["nvlink_group"])
    for gpu in host.gpus.all():
        Gpu.objects.filter(pk=gpu.pk).update(nvlink_group=f"{host.name}-nvl{gpu.index // 2}")


def test_gpus_in_pairs_are_four_groups_of_two():
    groups = nvlink_groups("", [(i, f"p{i // 2}") for i in range(8)])
    assert groups == {"p0": [0, 1], "p1": [2, 3], "p2": [4, 5], "p3": [6, 7]}
    assert nvlink_text(groups) == "4 groups of 2 GPUs"


def test_a_host_group_covers_every_gpu_and_a_gpu_without_one_on_a_paired_host_is_alone():
    assert nvlink_text(nvlink_groups("hgx", [(0, ""), (1, "")])) == "hgx (2 GPUs)"
    assert nvlink_groups("", [(0, "p0"), (1, "p0"), (2, "")]) == {"p0": [0, 1], "gpu2": [2]}
    assert nvlink_text(nvlink_groups("", [(0, ""), (1, "")])) == ""


def test_the_hosts_list_names_the_groups(client, ops, fleet):
    pair_up(fleet["hosts"]["h100-b"])
    client.force_login(ops)
    page = client.get("/hosts/").content.decode()
    row = next(r for r in page.split("<tr>") if ">h100-b<" in r)
    assert "4 groups of 2 GPUs" in row and "—" not in row
    assert "h100-a-nvl (8 GPUs)" in page


def test_the_host_page_lists_each_group_and_the_most_for_one_instance(client, ops, fleet):
    host = fleet["hosts"]["h100-b"]
    pair_up(host)
    client.force_login(ops)
    page = client.get(f"/hosts/{host.pk}/").content.decode()
    groups = page.split('id="nvlink-groups">')[1].split("</dd>")[0]
    assert groups.startswith("4 groups of 2 GPUs")
    assert '<span title="h100-b-nvl0">gpu0+1</span>' in groups and '<span title="h100-b-nvl3">gpu6+7</span>' in groups
    assert "at most 2 for one instance here" in groups
