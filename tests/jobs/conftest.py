"""Job fixtures: the shared fleet (two 8-GPU H100 hosts) with an idle-capacity price of
0.25 per GPU-hour beside the flat 1.00 on-demand one, so amounts work out by hand."""

from datetime import UTC, datetime

import pytest

from billing import price_changes as billing_price_changes
from instances.models import GpuModel
from jobs import submission

IDLE_PRICE = "0.25"


@pytest.fixture
def idle_price(fleet):
    since = datetime(2000, 1, 1, tzinfo=UTC)
    for sku in ("H100-80GB", "H200-141GB"):
        billing_price_changes.set_price(actor="system", sku=sku, kind="idle", hourly=IDLE_PRICE, effective_from=since,
                                   now=since)
    return fleet


@pytest.fixture
def submit(idle_price):
    """Submit a job through the service as ``actor`` for ``team``."""

    def _submit(actor, team, name="train", count=8, priority="low", model="H100-80GB", **kwargs):
        return submission.submit_job(actor=actor, team=team, name=name, command="python train.py --epochs 3",
                                   gpu_model=GpuModel.objects.get(name=model), gpu_count=count, priority=priority,
                                   **kwargs)

    return _submit
