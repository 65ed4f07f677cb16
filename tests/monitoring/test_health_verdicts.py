"""Every verdict from a simulated fault, judged as the console judges it."""

import pytest

from agent.backends.sim import SimGpu, SimHost, SimSource
from monitoring import health


def _judged(fault, ticks=1, throttled_s=0.0):
    gpu = SimGpu({"uuid": "GPU-sim-0", "index": 0}, seed=3)
    gpu.set_fault(fault)
    sim = SimSource([SimHost("sim-a", [gpu])])
    facts, metrics, xids, lost = {}, {}, [], False
    for n in range(ticks):
        for record in sim.tick(1_800_000_000.0 + n)["sim-a"]:
            event = record.get("event")
            if event is None:
                metrics = record["m"]
            elif event["kind"] == "health":
                facts = event["facts"]
            elif event["kind"] == "xid":
                xids.append(event["code"])
            elif event["kind"] == "gpu_lost":
                lost = True
    return health.judge(facts=facts, metrics=metrics, xids=xids, throttled_s=throttled_s, lost=lost)


@pytest.mark.parametrize("fault, state, words", [
    ("none", "healthy", "healthy"),
    ("ecc_uncorrected", "degraded", "2 uncorrected ECC errors since the last reset"),
    ("retired_pending", "degraded", "page retirement is pending"),
    ("remap_pending", "degraded", "row remapping is pending"),
    ("remap_failed", "failed", "row remapping failed"),
    ("pcie_width", "degraded", "PCIe link x8 of x16"),
    ("pcie_gen", "degraded", "PCIe link at Gen3 of Gen5 while busy"),
    ("nvlink_down", "degraded", "2 of 18 NVLink links inactive"),
    ("lost", "failed", "does not answer"),
])
def test_each_simulated_fault_has_its_verdict_in_words(fault, state, words):
    verdict = _judged(fault)
    assert verdict.state == state
    assert words in verdict.summary


@pytest.mark.parametrize("code, state", [
    (13, "healthy"), (31, "healthy"), (43, "healthy"), (45, "healthy"), (48, "failed"), (61, "degraded"),
    (62, "failed"), (63, "degraded"), (64, "failed"), (74, "failed"), (79, "failed"), (92, "degraded"),
    (94, "degraded"), (95, "failed"), (119, "failed"), (120, "failed"), (999, "degraded"),
])
def test_each_common_xid_has_a_meaning_an_action_and_a_state(code, state):
    verdict = _judged(f"xid:{code}")
    assert verdict.state == state
    assert verdict.reasons[0].text.startswith(f"XID {code}: ")
    assert verdict.reasons[0].action


def test_a_thermal_slowdown_counts_only_once_held_for_minutes():
    assert _judged("thermal", throttled_s=60).state == "healthy"
    held = _judged("thermal", throttled_s=600)
    assert held.state == "degraded"
    assert "hardware thermal slowdown for 10 min" in held.summary


def test_a_slow_pcie_link_on_an_idle_gpu_is_power_saving_not_a_fault():
    facts = {"pcie_gen": 1, "pcie_gen_max": 5, "pcie_width": 16, "pcie_width_max": 16}
    assert health.judge(facts=facts, metrics={"gpu_util": 0}).state == "healthy"


def test_the_host_takes_its_worst_gpu_and_names_it():
    verdict = health.host_verdict({0: health.judge(), 3: health.judge(xids=[79]), 5: health.judge(xids=[92])})
    assert verdict.state == "failed"
    assert verdict.reasons[0].text.startswith("GPU 3: XID 79")


def test_an_unknown_fault_name_is_refused():
    from agent.backends.sim import FleetError

    with pytest.raises(FleetError, match="unknown fault"):
        SimGpu({"uuid": "GPU-sim-0", "index": 0}, seed=3).set_fault("melted")


def test_a_gpu_with_no_nvlink_link_up_at_all_is_a_card_without_a_bridge():
    verdict = health.judge(facts={"nvlink_links": 18, "nvlink_down": 18})
    assert verdict.state == "healthy"
    assert "no NVLink link active" in verdict.summary
