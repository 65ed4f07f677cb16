"""tflops_est: GPM tensor activity × the precision's dense peak × clock ratio × the
model's calibration factor, labelled with its basis; the precision is the instance's
(test_precision_history.py: the one in force at each reading's time)."""

from datetime import timedelta

import pytest
from django.utils import timezone
from telemetry_wire import add_samples

from instances import lifecycle as instance_lifecycle
from instances import transitions as instance_transitions
from monitoring import flops

# Measured on an H200 (bench/tflops_calibration.py, docs/benchmarks.md):
# (precision, n, achieved TFLOP/s, tensor activity %, SM clock MHz)
H200_RUNS = [
    ("bf16", 8192, 672.0, 92.87, 1485), ("bf16", 8192, 667.0, 92.47, 1470), ("bf16", 4096, 665.0, 88.58, 1575),
    ("fp16", 8192, 640.5, 92.46, 1425), ("tf32", 8192, 347.2, 92.42, 1500), ("tf32", 8192, 347.9, 92.48, 1470),
    ("fp8", 8192, 1223.3, 90.71, 1350), ("fp8", 8192, 1227.8, 91.48, 1365), ("fp8", 4096, 1097.7, 76.67, 1470),
]


@pytest.mark.parametrize(("precision", "n", "achieved", "tensor", "clock"), H200_RUNS)
def test_large_matmuls_on_the_h200_are_within_15_percent(precision, n, achieved, tensor, clock):
    estimate = flops.estimate(tensor, clock, flops.basis("H200-141GB", precision))
    assert abs(estimate / achieved - 1) <= 0.15


def test_the_basis_names_what_it_rests_on():
    assert flops.basis("A100-80GB", "fp8") is None  # no fp8 on an A100
    assert flops.basis("MI300X", "bf16") is None
    assert flops.slice_share("H100-20C", "vgpu") is None
    third = flops.basis("A100-80GB", "bf16", share=flops.slice_share("3g.40gb", "mig"))
    assert third.peak_tflops == pytest.approx(312 * 3 / 7)
    text = flops.basis("H200-141GB", "tf32").describe()
    assert text.startswith("Estimate: GPM tensor activity × 494.7 TFLOP/s (H200 dense tf32 peak)")


@pytest.fixture
def busy_instance(acme_instance):
    gpu = acme_instance.gpus.order_by("index").first()
    start = timezone.now() - timedelta(minutes=5)
    add_samples(gpu, start, [{"tensor_active_pct": 50.0, "sm_clock_mhz": 1980}] * 3, instance=acme_instance,
                step=timedelta(seconds=10))
    return acme_instance, gpu


def series(api, user, instance, gpu):
    body = api(user).get(f"/api/v1/instances/{instance.pk}/metrics/", {"metric": "tflops_est"}).json()
    return body, body["gpus"][gpu.uuid]["tflops_est"]["avg"]


def test_the_metrics_api_serves_tflops_est_at_the_instances_precision(api, bob, busy_instance):
    instance, gpu = busy_instance
    body, values = series(api, bob, instance, gpu)
    assert values == [pytest.approx(0.5 * 989.4 * 0.98, abs=0.01)] * 3
    assert body["precision"] == "bf16"
    assert body["tflops_basis"][gpu.uuid]["text"].startswith("Estimate: GPM tensor activity × 989.4")
    assert "set by the team" not in body["tflops_basis"][gpu.uuid]["text"]
    instance_lifecycle.set_precision(actor=bob, instance=instance, precision="tf32")
    body, values = series(api, bob, instance, gpu)
    assert values == [pytest.approx(0.5 * 989.4 * 0.98, abs=0.01)] * 3  # readings before the change keep bf16
    assert body["precision"] == "tf32"


def test_an_unknown_precision_is_refused(bob, acme_instance):
    with pytest.raises(instance_transitions.LifecycleError):
        instance_lifecycle.set_precision(actor=bob, instance=acme_instance, precision="int4")
