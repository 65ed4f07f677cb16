"""A websocket app served by a real daphne in tests: on "flush N" one live socket's
merge (``monitoring.fanout``) sends the browser one batch of N GPU readings, as the
fleet group's coalescer would hand them over."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuconsole.settings")
django.setup()

from agent.protocol import LiveReading, Metrics  # noqa: E402
from gpuconsole import serving  # noqa: E402
from monitoring import fanout  # noqa: E402
from monitoring.readings import Live  # noqa: E402

serving.install()

METRICS = Metrics(gpu_util=97, mem_util=61, mem_used=73_014_444_032, power_mw=687_512, temp_c=71,
                  fan_pct=0, sm_clock_mhz=1_755, mem_clock_mhz=2_619, energy_mj=912_345_678,
                  sm_occupancy_pct=43.25, tensor_active_pct=88.5, dram_bw_util_pct=51.75,
                  clocks_event_reasons=0, pcie_tx_bytes=123_456_789, pcie_rx_bytes=987_654_321)


def reading(i: int) -> Live:
    t = 1_764_780_000.0 + i / 1000
    return Live(LiveReading(f"GPU-{i:08d}-c4d9-ea4f-fa04-56bccf2abc35", f"use1-h200-{i // 8:04d}", i % 8, 1_000 + i // 8,
                            1, f"2026-12-03T16:00:{i % 60:02d}.{i:06d}+00:00", METRICS, False), t=t, host_id=i // 8 + 1)


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        return
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    merge = fanout.SocketMerge(0.05, lambda text: send({"type": "websocket.send", "text": text}))
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            merge.close()
            return
        count = int(message["text"].split()[1])
        for group, sent in fanout.sends([reading(i) for i in range(count)]):
            if group == fanout.FLEET_GROUP:
                merge.add(fanout.readings_of(sent))
