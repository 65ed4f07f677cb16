"""/metrics speaks dcgm-exporter's names and labels, to operators only."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from console import services as console_services
from monitoring.models import AgentState, GpuEvent, GpuLatest

LINE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)\{((?:[A-Za-z_][A-Za-z0-9_]*="(?:[^"\\]|\\.)*",?)*)\} (-?[0-9.e+]+)$')


def latest(gpu, m, *, seen=None, **kw):
    now = timezone.now()
    return GpuLatest.objects.create(uuid=kw.pop("uuid", gpu.uuid), gpu=gpu, host=gpu.host, time=now,
                                    last_seen=seen or now, metrics=m, team=gpu.team, instance=gpu.instance, **kw)


@pytest.fixture
def scrape(client, ops):
    _, raw = console_services.create_api_token(actor=ops, user=ops, name="prometheus")

    def get():
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Token {raw}")
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/plain; version=0.0.4")
        return response.content.decode()

    return get


def series(text: str) -> dict[str, list[tuple[dict, float]]]:
    out: dict[str, list] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = LINE.match(line)
        assert match, line
        labels = dict(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"', match.group(2)))
        out.setdefault(match.group(1), []).append((labels, float(match.group(3))))
    return out


def test_a_held_gpu_has_dcgm_names_units_and_labels(scrape, acme_instance):
    gpu = acme_instance.gpus.order_by("index").first()
    latest(gpu, {"gpu_util": 87, "mem_used": 40 * 2**30, "power_mw": 612_345, "temp_c": 61, "sm_clock_mhz": 1980,
                 "tensor_active_pct": 50.0, "energy_mj": 123_456_789})
    found = series(scrape())
    labels, value = found["DCGM_FI_DEV_GPU_UTIL"][0]
    assert value == 87
    assert labels == {"gpu": str(gpu.index), "UUID": gpu.uuid, "pci_bus_id": "", "device": f"nvidia{gpu.index}",
                      "modelName": "H100-80GB", "Hostname": "h100-a", "hostname": "h100-a", "instance": "h100-a",
                      "team": "acme", "console_instance": "acme-train", "instance_id": str(acme_instance.pk),
                      "console_job": ""}
    assert found["DCGM_FI_DEV_FB_USED"][0][1] == 40 * 1024
    assert found["DCGM_FI_DEV_FB_FREE"][0][1] == 40 * 1024
    assert found["DCGM_FI_DEV_POWER_USAGE"][0][1] == pytest.approx(612.345)
    assert found["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"][0][1] == 0.5
    assert found["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][0][1] == 123_456_789
    assert "DCGM_FI_DEV_MEM_CLOCK" not in found  # not reported, so absent, never 0


def test_mig_slices_carry_their_instance_labels(scrape, fleet):
    piece = fleet["hosts"]["a100-mig"].gpus.first().slices.first()
    latest(piece.gpu, {"gpu_util": 12}, uuid=piece.uuid, slice=piece)
    labels, _ = series(scrape())["DCGM_FI_DEV_GPU_UTIL"][0]
    assert (labels["UUID"], labels["GPU_I_PROFILE"], labels["GPU_I_ID"]) == (piece.gpu.uuid, "1g.10gb", "1")


def test_a_stale_gpu_keeps_only_its_stale_flag(scrape, fleet):
    gpu = fleet["hosts"]["h100-b"].gpus.first()
    latest(gpu, {"gpu_util": 5}, seen=timezone.now() - timedelta(minutes=5))
    found = series(scrape())
    assert "DCGM_FI_DEV_GPU_UTIL" not in found
    assert found["gpuconsole_gpu_stale"][0][1] == 1


def test_the_last_xid_and_agent_counters(scrape, fleet):
    gpu = fleet["hosts"]["h100-a"].gpus.first()
    latest(gpu, {"gpu_util": 1})
    GpuEvent.objects.create(kind="xid", code=43, host=gpu.host, gpu=gpu, uuid=gpu.uuid, time=timezone.now() - timedelta(minutes=1))
    GpuEvent.objects.create(kind="xid", code=79, host=gpu.host, gpu=gpu, uuid=gpu.uuid)
    AgentState.objects.create(host=gpu.host, connected=True, samples=1234, bad_frames=2)
    found = series(scrape())
    assert found["DCGM_FI_DEV_XID_ERRORS"][0][1] == 79
    assert found["gpuconsole_agent_samples_total"] == [({"Hostname": "h100-a", "hostname": "h100-a", "instance": "h100-a"}, 1234)]
    assert found["gpuconsole_agent_bad_frames_total"][0][1] == 2


def test_label_values_are_escaped():
    from monitoring.exposition import labels

    assert labels([("instance", 'a"b\\c\nd')]) == '{instance="a\\"b\\\\c\\nd"}'


def test_it_takes_a_fixed_number_of_queries(scrape, fleet, django_assert_max_num_queries):
    for gpu in fleet["hosts"]["h100-a"].gpus.all():
        latest(gpu, {"gpu_util": 3})
    with django_assert_max_num_queries(6):
        scrape()


def test_anonymous_gets_401(client, fleet):
    response = client.get("/metrics")
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Token"


def test_a_bad_token_gets_401(client, fleet):
    assert client.get("/metrics", HTTP_AUTHORIZATION="Token gpc_nope").status_code == 401


def test_a_team_member_gets_403(client, bob):
    _, raw = console_services.create_api_token(actor=bob, user=bob, name="x")
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Token {raw}").status_code == 403


def test_an_operator_session_works(client, ops, fleet):
    client.force_login(ops)
    assert client.get("/metrics").status_code == 200
