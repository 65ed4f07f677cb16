"""The group page's chart: desired vs running instances and the queue depth over time,
built with monitoring's chart pieces (one look for every time chart)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

from monitoring.charts import PALETTE, figure, layout, plot_time

from .models import Action, ScalingDecision

MAX_POINTS = 1500


def thin(decisions: Sequence[ScalingDecision], limit: int = MAX_POINTS) -> list[ScalingDecision]:
    """At most about ``limit`` decisions, oldest first: every one that changed desired,
    running or acted, and an even sample of the rest (the queue depth's shape)."""
    rows = sorted(decisions, key=lambda d: (d.time, d.pk or 0))
    if len(rows) <= limit:
        return rows
    stride = math.ceil(len(rows) / limit)
    kept, before = [], None
    for i, d in enumerate(rows):
        turned = before is None or (d.desired, d.running) != (before.desired, before.running) or d.action != Action.NONE
        if turned or i % stride == 0 or i == len(rows) - 1:
            kept.append(d)
        before = d
    return kept


def history_figure(decisions: Sequence[ScalingDecision], *, start: datetime | None = None,
                   end: datetime | None = None) -> dict:
    """The window [start, end] (``end`` is now on the page): the last decision's counts
    hold until ``end``, since nothing changed after it."""
    rows = thin(decisions)
    if rows and end is not None and rows[-1].time < end:
        last = rows[-1]
        rows.append(ScalingDecision(time=end, queue_depth=last.queue_depth, desired=last.desired,
                                    running=last.running, action=Action.NONE))
    x = [plot_time(d.time) for d in rows]

    def step(name, values, color, dash="solid"):
        return {"type": "scatter", "mode": "lines", "name": name, "x": x, "y": values,
                "line": {"color": color, "width": 2, "shape": "hv", "dash": dash},
                "hovertemplate": f"%{{y}}<extra>{name}</extra>"}

    data = [
        step("Desired", [d.desired for d in rows], PALETTE["accent"], "dash"),
        step("Running", [d.running for d in rows], PALETTE["ok"]),
        {"type": "scatter", "mode": "lines", "name": "Queue depth", "x": x, "yaxis": "y2",
         "y": [d.queue_depth for d in rows], "line": {"color": PALETTE["warn"], "width": 1.5, "shape": "hv"},
         "connectgaps": False, "hovertemplate": "%{y} queued<extra>Queue depth</extra>"},
    ]
    fig_layout = layout("Desired vs running instances, and queue depth", "Instances", height=320)
    if start is not None and end is not None:
        fig_layout["xaxis"] = {**fig_layout.get("xaxis", {}), "range": [plot_time(start), plot_time(end)]}
    if max((max(d.desired, d.running) for d in rows), default=0) <= 10:
        fig_layout["yaxis"]["dtick"] = 1
    fig_layout["yaxis2"] = {"title": {"text": "Queued items"}, "overlaying": "y", "side": "right",
                            "rangemode": "tozero", "tickmode": "auto", "tickformat": ",d", "showgrid": False,
                            "fixedrange": True}
    fig_layout["margin"] = {**fig_layout["margin"], "r": 60, "b": 66}
    return figure(data, fig_layout, name="scaling", unit="instances")
