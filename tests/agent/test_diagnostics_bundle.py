"""The diagnostics bundle and the health facts, as the agent reads them."""

import hashlib
import json
import stat
import tarfile

import pytest

from agent import diagnostics


class FakeNv:
    """The NVML calls the health facts and the bundle's report make, for one GPU."""

    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, remap=(3, 1, True, False), nvlink=(1,) * 16 + (0, 0), gen=(4, 5), width=(16, 16)):
        self.remap, self.nvlink, self.gen, self.width = remap, nvlink, gen, width

    def nvmlSystemGetDriverVersion(self):
        return "580.95.05"

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return "h0"

    def nvmlDeviceGetUUID(self, h):
        return "GPU-aaaa"

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        return {(1, 1): 2, (0, 1): 40}.get((kind, counter), 0)

    def nvmlDeviceGetRetiredPages(self, h, cause):
        raise RuntimeError("NotSupported")  # Hopper remaps rows instead

    def nvmlDeviceGetRemappedRows(self, h):
        return self.remap

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self.gen[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self.gen[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self.width[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self.width[1]

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= len(self.nvlink):
            raise RuntimeError("InvalidArgument")
        return self.nvlink[link]


def test_health_facts_read_ecc_row_remapping_pcie_and_nvlink():
    facts = diagnostics.health_facts(FakeNv(), "h0")
    assert facts == {
        "ecc_corrected_aggregate": 40, "ecc_uncorrected_aggregate": 2,
        "remap_correctable": 3, "remap_uncorrectable": 1, "remap_pending": 1, "remap_failed": 0,
        "pcie_gen": 4, "pcie_gen_max": 5, "pcie_width": 16, "pcie_width_max": 16,
        "nvlink_links": 18, "nvlink_down": 2,
    }


def test_a_fact_the_gpu_does_not_support_is_absent_not_zero():
    assert "retired_sbe" not in diagnostics.health_facts(FakeNv(), "h0")


def _bundle(tmp_path, **kw):
    path = tmp_path / "bundle.tar.gz"
    manifest = diagnostics.collect(str(path), nv=FakeNv(), log_tail=diagnostics.LogTail(), **kw)
    return path, manifest, {i["name"]: i for i in manifest["items"]}


@pytest.fixture
def bare_path(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def test_a_missing_tool_is_recorded_as_missing_not_a_failure(tmp_path, bare_path):
    _, manifest, items = _bundle(tmp_path)
    assert items["nvidia-smi-q.xml"]["status"] == "missing"
    assert items["nvidia-debugdump-list.txt"]["status"] == "missing"
    assert items["kernel-nvrm.log"]["status"] == "unreadable"
    assert items["nvml.json"]["status"] == "ok"
    assert manifest["versions"]["driver"] == "580.95.05"


def test_a_tool_present_is_run_and_its_output_kept_with_its_checksum(tmp_path, bare_path):
    tool = bare_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho '<nvidia_smi_log/>'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    path, _, items = _bundle(tmp_path)
    with tarfile.open(path) as tar:
        assert tar.getnames()[0] == "manifest.json"
        body = tar.extractfile("nvidia-smi-q.xml").read()
        manifest = json.loads(tar.extractfile("manifest.json").read())
    assert body == b"<nvidia_smi_log/>\n"
    assert items["nvidia-smi-q.xml"]["status"] == "ok" and items["nvidia-smi-q.xml"]["rc"] == 0
    assert {i["name"]: i["sha256"] for i in manifest["items"] if "sha256" in i}["nvidia-smi-q.xml"] == \
        hashlib.sha256(body).hexdigest()


def test_the_bundle_is_capped_and_says_what_was_cut(tmp_path, bare_path):
    _, _, items = _bundle(tmp_path, max_bytes=100)
    assert items["nvml.json"]["status"] == "truncated"
    assert sum(i.get("bytes", 0) for i in items.values()) <= 100


def test_the_agent_log_tail_goes_in(tmp_path, bare_path):
    tail = diagnostics.LogTail()
    tail.install()
    try:
        import logging

        logging.getLogger("gpuconsole.agent").warning("GPU 3 is lost")
        path = tmp_path / "b.tar.gz"
        diagnostics.collect(str(path), nv=FakeNv(), log_tail=tail)
        with tarfile.open(path) as tar:
            assert b"GPU 3 is lost" in tar.extractfile("agent.log").read()
    finally:
        logging.getLogger("gpuconsole.agent").removeHandler(tail)


def test_the_upload_address_follows_the_websocket_server():
    assert diagnostics.upload_url("wss://console.example/ws/agent/", "/api/v1/agent/diagnostics/7/") == \
        "https://console.example/api/v1/agent/diagnostics/7/"


def test_the_nvml_backend_sends_health_facts_only_when_they_change(fake_nvml):
    from agent.backends.nvml import NvmlSource

    fake = fake_nvml()
    remap = [(0, 0, False, False)]
    fake.nvmlDeviceGetRemappedRows = lambda h: remap[0]
    source = NvmlSource(host="h200-a")
    source.open()
    first = source.sample_health()
    assert [r["event"]["facts"]["remap_pending"] for r in first] == [0, 0]
    assert source.sample_health() == []
    remap[0] = (0, 1, True, False)
    assert {r["event"]["facts"]["remap_pending"] for r in source.sample_health()} == {1}
