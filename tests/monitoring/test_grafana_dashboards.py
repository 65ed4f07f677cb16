"""The Grafana dashboards users already have, against a real Prometheus.

A Prometheus (Debian's `prometheus` package) scrapes a live console's /metrics as
docs/telemetry.md says (operator token, ``honor_labels: true``), and every panel query of
dcgm-exporter's dashboard is evaluated through its HTTP API, with ``$instance`` and
``$gpu`` at ``.*`` as the dashboard's "All" sends them: each panel shows one series per
GPU (or MIG slice), with the GPU's host as ``instance`` and ``hostname``.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from datetime import timedelta

import pytest
from django.utils import timezone

from console import services as console_services
from monitoring.models import GpuLatest

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="Prometheus is not installed (Debian: apt-get install -y prometheus)"
)

# Panel queries of NVIDIA/dcgm-exporter grafana/dcgm-exporter-dashboard.json, the dashboard
# published as Grafana 12239: today's file (8 panels, `$var`) and the 2020 revisions still
# in use (`${var}`; Memory Clocks, Mem Cpy Utilization and Framebuffer Mem Free panels).
CURRENT = {
    "GPU Temperature": 'DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"}',
    "GPU Avg. Temp": 'avg(DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"})',
    "GPU Power Usage": 'DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"}',
    "GPU Power Total": 'sum(DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"})',
    "GPU SM Clocks": 'DCGM_FI_DEV_SM_CLOCK{instance=~"$instance", gpu=~"$gpu"} * 1000000',
    "GPU Utilization": 'DCGM_FI_DEV_GPU_UTIL{instance=~"$instance", gpu=~"$gpu"}',
    "GPU Framebuffer Mem Used": 'DCGM_FI_DEV_FB_USED{instance=~"$instance", gpu=~"$gpu"}',
    "Tensor Core Utilization": 'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{instance=~"$instance", gpu=~"$gpu"}',
}
GRAFANA_12239 = {
    title: expr.replace("$instance", "${instance}").replace("$gpu", "${gpu}") for title, expr in CURRENT.items()
} | {
    "GPU Memory Clocks": 'DCGM_FI_DEV_MEM_CLOCK{instance=~"${instance}", gpu=~"${gpu}"} * 1000000',
    "GPU Mem Cpy Utilization": 'DCGM_FI_DEV_MEM_COPY_UTIL{instance=~"${instance}", gpu=~"${gpu}"}',
    "GPU Framebuffer Mem Free": 'DCGM_FI_DEV_FB_FREE{instance=~"${instance}", gpu=~"${gpu}"}',
}
PANELS = [(name, title, expr) for name, panels in (("dcgm-exporter", CURRENT), ("12239", GRAFANA_12239))
          for title, expr in panels.items()]

GIB = 2**30


def reading(k: int) -> dict:
    return {"gpu_util": 10 + k, "mem_util": 5 + k, "mem_used": (k + 1) * GIB, "mem_total": 80 * GIB,
            "power_mw": 100_000 + 1000 * k, "temp_c": 40 + k, "sm_clock_mhz": 1500 + k, "mem_clock_mhz": 2600,
            "tensor_active_pct": 2.0 * k}


@pytest.fixture
def readings(fleet, acme_instance):
    """{(host, gpu index, GPU_I_ID): metrics}: h100-a's 8 GPUs (some held by acme-train),
    h200-a's one, two MIG slices of a100-mig's GPU 0, and h100-b's GPU 0 gone quiet."""
    now = timezone.now()
    devices = [*fleet["hosts"]["h100-a"].gpus.all(), *fleet["hosts"]["h200-a"].gpus.all()]
    devices += [(piece.gpu, piece) for piece in fleet["hosts"]["a100-mig"].gpus.get(index=0).slices.all()[:2]]
    expected = {}
    for k, device in enumerate(devices):
        gpu, piece = device if isinstance(device, tuple) else (device, None)
        m = reading(k)
        GpuLatest.objects.create(uuid=piece.uuid if piece else gpu.uuid, gpu=gpu, slice=piece, host=gpu.host,
                                 time=now, last_seen=now, metrics=m, team=gpu.team, instance=gpu.instance)
        expected[(gpu.host.name, str(gpu.index), str(piece.gpu_instance_id) if piece else "")] = (gpu, m)
    quiet = fleet["hosts"]["h100-b"].gpus.get(index=0)
    GpuLatest.objects.create(uuid=quiet.uuid, gpu=quiet, host=quiet.host, time=now - timedelta(minutes=5),
                             last_seen=now - timedelta(minutes=5), metrics=reading(0))
    return expected


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, base: str, log):
        self.base, self.log = base, log

    def get(self, path: str, **params) -> dict:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params, doseq=True)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        return self.get("/api/v1/query", query=expr)["result"]

    def wait_for(self, expr: str, what: str, limit_s: float = 60) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            try:
                if self.query(expr):
                    return
            except OSError:
                pass
            time.sleep(0.25)
        targets = self.get("/api/v1/targets")["activeTargets"]
        pytest.fail(f"Prometheus never {what}: targets {targets}\n{self.log.read_text()[-3000:]}")


@pytest.fixture
def prometheus(live_server, ops, readings, tmp_path):
    _, raw = console_services.create_api_token(actor=ops, user=ops, name="prometheus")
    (tmp_path / "token").write_text(raw)
    target = live_server.url.removeprefix("http://")
    (tmp_path / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, scrape_timeout: 1s}}
scrape_configs:
  - job_name: gpu-console
    metrics_path: /metrics
    honor_labels: true
    authorization: {{type: Token, credentials_file: {tmp_path / "token"}}}
    static_configs: [{{targets: ["{target}"]}}]
""")
    port = _free_port()
    log = tmp_path / "prometheus.log"
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log.open("w"), stderr=subprocess.STDOUT,
    )
    try:
        prom = Prometheus(f"http://127.0.0.1:{port}", log)
        prom.wait_for('up{job="gpu-console"} == 1', "scraped /metrics")
        prom.wait_for("count_over_time(DCGM_FI_DEV_GPU_TEMP[1m]) >= 2", "stored two scrapes")
        yield prom
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _panel(expr: str, instance: str = ".*", gpu: str = ".*") -> str:
    for name, value in (("instance", instance), ("gpu", gpu)):
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    return expr


def _expected_value(expr: str, m: dict) -> float:
    for metric, value in [
        ("GPU_TEMP", m["temp_c"]), ("POWER_USAGE", m["power_mw"] / 1000), ("SM_CLOCK", m["sm_clock_mhz"] * 1e6),
        ("MEM_CLOCK", m["mem_clock_mhz"] * 1e6), ("GPU_UTIL", m["gpu_util"]), ("MEM_COPY_UTIL", m["mem_util"]),
        ("FB_USED", m["mem_used"] / 2**20), ("FB_FREE", (m["mem_total"] - m["mem_used"]) / 2**20),
        ("TENSOR_ACTIVE", m["tensor_active_pct"] / 100),
    ]:
        if f"_{metric}{{" in expr:
            return value
    raise AssertionError(expr)


def _device(series: dict) -> tuple[str, str, str]:
    labels = series["metric"]
    return labels["instance"], labels["gpu"], labels.get("GPU_I_ID", "")


def _check_panel(prometheus, readings, expr: str) -> None:
    query = _panel(expr)
    found = prometheus.query(query)
    values = [_expected_value(expr, m) for _, m in readings.values()]
    if expr.startswith(("avg(", "sum(")):
        assert len(found) == 1, found
        want = sum(values) / len(values) if expr.startswith("avg(") else sum(values)
        assert float(found[0]["value"][1]) == pytest.approx(want)
        return
    assert sorted(_device(series) for series in found) == sorted(readings), query
    for series in found:
        labels = series["metric"]
        gpu, m = readings[_device(series)]
        assert labels["hostname"] == labels["Hostname"] == labels["instance"] == gpu.host.name
        assert labels["UUID"] == gpu.uuid
        assert float(series["value"][1]) == pytest.approx(_expected_value(expr, m))


@pytest.mark.django_db(transaction=True)
def test_each_panel_shows_one_series_per_gpu(prometheus, readings):
    failed = {}
    for dashboard, title, expr in PANELS:
        try:
            _check_panel(prometheus, readings, expr)
        except AssertionError as error:
            failed[f"{dashboard}: {title}"] = str(error)[:500]
    assert not failed, failed


@pytest.mark.django_db(transaction=True)
def test_the_instance_drop_down_lists_hosts_and_picks_one(prometheus, readings):
    hosts = prometheus.get("/api/v1/label/instance/values", **{"match[]": "DCGM_FI_DEV_GPU_TEMP"})
    assert sorted(hosts) == ["a100-mig", "h100-a", "h200-a"]
    found = prometheus.query(_panel(CURRENT["GPU Utilization"], instance="h200-a"))
    assert [_device(series) for series in found] == [("h200-a", "0", "")]


@pytest.mark.django_db(transaction=True)
def test_a_graph_over_time_has_one_line_per_gpu(prometheus, readings):
    end = time.time()
    found = prometheus.get("/api/v1/query_range", query=_panel(CURRENT["GPU Utilization"]),
                           start=end - 60, end=end, step=1)["result"]
    assert sorted(_device(series) for series in found) == sorted(readings)
    assert all(len(series["values"]) >= 2 for series in found)
