"""A GPU gone quiet is marked stale on live views, with its last known reading."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from monitoring import fanout
from monitoring.models import GpuLatest

pytestmark = pytest.mark.django_db


def test_a_quiet_gpu_goes_out_stale_with_its_last_reading(fleet, monkeypatch):
    sent = []

    async def send_each(sends, **_):
        sent.extend((group, fanout.unpack(message["readings"])) for group, message in sends)

    monkeypatch.setattr(fanout, "send_each", send_each)
    gpu = fleet["hosts"]["h100-a"].gpus.get(index=3)
    now = timezone.now()
    quiet = now - timedelta(seconds=20)
    GpuLatest.objects.create(uuid=gpu.uuid, gpu=gpu, host=gpu.host, time=quiet, last_seen=quiet,
                             metrics={"gpu_util": 7, "energy_mj": 2**64 - 1})
    assert fanout.publish_stale(now=now) == 1
    fleet_sent = dict(sent)["fleet"]
    [(uuid, (t, stale), text)] = fleet_sent
    assert (uuid, t, stale) == (gpu.uuid, quiet.timestamp(), True)
    assert json.loads(text) == {"uuid": gpu.uuid, "host": gpu.host.name, "index": gpu.index, "instance": None,
                                "team": None, "t": quiet.isoformat(), "m": {"gpu_util": 7, "energy_mj": 2**64 - 1},
                                "stale": True}
