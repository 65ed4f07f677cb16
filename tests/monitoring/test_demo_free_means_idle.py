"""Free means idle, on the seeded demo with the simulated agent following the console:
a GPU no instance holds reads idle and runs no process; a GPU running a low-priority
job is not free and names its job as holder on the overview, the host page, the API and
/metrics."""

import itertools
import re
import time
from datetime import timedelta

import msgspec
import pytest
from django.test import Client

from agent.backends.sim import SimSource, apply_allocations, load_fleet
from billing import demo as billing_demo
from console import services as console_services
from gpuconsole import demo as console_demo
from instances import demo as instances_demo
from instances import placement as instance_placement
from instances.models import Gpu, Host, HostKind
from jobs import demo as jobs_demo
from jobs.models import Job
from monitoring import demo, ingest
from monitoring.exposition import render
from monitoring.frames import Samples
from monitoring.models import GpuLatest, Sample


@pytest.fixture
def seeded(db, settings, tmp_path, monkeypatch):
    settings.VAR_DIR = tmp_path
    monkeypatch.setattr(demo, "HISTORY", timedelta(hours=1))
    monkeypatch.setattr(demo, "ADVICE_HISTORY", timedelta(hours=1))  # and a week for rightsizing
    users = console_demo.seed()
    instances_demo.seed_fleet(actor=users["ops"])
    billing_demo.seed_catalog(users=users)
    instances_demo.seed_instances(users=users)
    jobs_demo.seed(users=users)
    demo.seed(users=users)
    return users


@pytest.fixture
def followed(seeded):
    """Three seconds of the demo's sim agent following /api/v1/agent/allocations/, stored
    through ingest as the agent websocket stores them."""
    fleet = load_fleet(demo.fleet_path())
    source = SimSource.from_fleet(fleet)
    for host in source.fleet:
        for gpu in host.gpus:
            gpu.follow = True
        answer = Client().get("/api/v1/agent/allocations/", HTTP_AUTHORIZATION=f"Bearer {host.token}")
        apply_allocations(host, answer.json()["devices"])
    links = {h.name: ingest.Link(h.pk, h.name) for h in Host.objects.all()}
    seqs = itertools.count(1)
    start = time.time() - 3
    for k in range(3):
        for name, records in source.tick(start + k).items():
            for record in records:
                record["seq"] = next(seqs)
            batch = msgspec.convert({"boot_id": "ab" * 16, "records": records, "v": 1}, Samples)
            ingest.store(link=links[name], batches=[batch])
    return seeded


def _processes(gpu: Gpu) -> list:
    return [p for row in Sample.objects.filter(gpu=gpu, slice=None) for p in row.procs or ()]


def _metrics_labels(text: str, uuid: str) -> dict:
    line = next(x for x in text.splitlines() if x.startswith("DCGM_FI_DEV_GPU_UTIL{") and f'UUID="{uuid}"' in x)
    return dict(re.findall(r'([A-Za-z_]+)="([^"]*)"', line))


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_free_gpus_idle_and_job_gpus_name_their_job_everywhere(followed):
    ops = _client(followed["ops"])
    whole = Gpu.objects.filter(host__kind=HostKind.PASSTHROUGH).select_related("host", "instance", "model")
    free = [g for g in whole if g.instance is None]
    jobs = {j.instance_id: j for j in Job.objects.filter(state="running", priority="low")}
    on_jobs = [g for g in whole if g.instance_id in jobs]
    assert free and len(on_jobs) >= 8 and len(jobs) == 2
    metrics = render()
    api = {row["uuid"]: row for row in ops.get("/api/v1/gpus/?page_size=500").json()["results"]}
    latest_api = {row["uuid"]: row for row in ops.get("/api/v1/gpu-latest/?page_size=500").json()["results"]}
    pages = {h.pk: ops.get(f"/hosts/{h.pk}/").content.decode() for h in {g.host for g in whole}}

    for gpu in free:
        latest = GpuLatest.objects.get(uuid=gpu.uuid)
        assert latest.metrics["gpu_util"] == 0 and latest.instance_id is None, gpu.uuid
        assert _processes(gpu) == [], gpu.uuid
        assert api[gpu.uuid]["instance"] is None and api[gpu.uuid]["job"] is None
        assert latest_api[gpu.uuid]["instance"] is None
        assert _metrics_labels(metrics, gpu.uuid)["console_instance"] == ""
        assert re.search(rf'data-uuid="{gpu.uuid}".*?data-holder="" data-job="">free<', pages[gpu.host_id], re.S)

    for gpu in on_jobs:
        job = jobs[gpu.instance_id]
        assert _processes(gpu), gpu.uuid
        assert api[gpu.uuid]["job"] == latest_api[gpu.uuid]["job"] == job.name
        labels = _metrics_labels(metrics, gpu.uuid)
        assert (labels["console_job"], labels["console_instance"]) == (job.name, gpu.instance.name)
        assert re.search(rf'data-uuid="{gpu.uuid}".*?data-job="{job.name}">.*?job {job.name} \(low priority\)',
                         pages[gpu.host_id], re.S)
    for model in {g.model for g in on_jobs}:
        free_of_model = sum(1 for g in free if g.model_id == model.pk and g.host.state == "active"
                            and g.cordoned_at is None and g.host.cordoned_at is None)
        assert instance_placement.free_capacity(gpu_model=model)[0] == free_of_model
        capacity = {r["model"]: r for r in ops.get("/api/v1/overview/").json()["capacity"]}
        assert capacity[model.name]["free"] == free_of_model


def test_a_team_overview_names_the_job_holding_its_gpus(followed):
    page = _client(followed["bob"]).get("/").content.decode()
    assert 'data-job="nightly-eval">job nightly-eval (low priority)' in page
    assert "render-backfill" not in page  # Globex's job


def test_metrics_over_http_name_both_jobs(followed):
    _, raw = console_services.create_api_token(actor=followed["ops"], user=followed["ops"], name="p")
    text = Client().get("/metrics", HTTP_AUTHORIZATION=f"Token {raw}").content.decode()
    assert 'console_job="render-backfill"' in text and 'console_job="nightly-eval"' in text
