"""Plotly figures for the cost explorer: pure functions from data to a figure dict.
Money goes into figures as decimal strings (plotly reads numeric strings as numbers),
so no float ever holds an amount. Every axis has a title with its unit. Colours and the
plotly config are the console's (monitoring/charts.py); the page draws the figures as
they come (static/billing/costs.js)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal

from monitoring.charts import CONFIG, PALETTE, alpha

from .costs import CoverageDay, IdleRow
from .forecast import Forecast

COLORS = {"standard": PALETTE["accent"], "committed": PALETTE["ok"], "dynamic": PALETTE["warn"]}
NAMES = {"standard": "On-demand (Standard)", "committed": "Reserved (Committed)", "dynamic": "Spot (Dynamic)"}
TEXT, GRID, PANEL, DIM = PALETTE["text"], PALETTE["grid"], PALETTE["panel"], PALETTE["dim"]


def _money(value: Decimal) -> str:
    return str(value.quantize(Decimal("0.01")))


def _layout(title: str, x_title: str, y_title: str, **extra) -> dict:
    layout = {
        "title": {"text": title, "font": {"size": 14}},
        "paper_bgcolor": PANEL,
        "plot_bgcolor": PANEL,
        "font": {"color": TEXT, "size": 12},
        "margin": {"l": 70, "r": 20, "t": 40, "b": 90},
        "xaxis": {"title": {"text": x_title}, "gridcolor": GRID, "zerolinecolor": GRID},
        "yaxis": {"title": {"text": y_title}, "gridcolor": GRID, "zerolinecolor": GRID},
        "legend": {"orientation": "h", "y": -0.32, "x": 0},
        "hovermode": "x unified",
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(layout.get(key), dict):
            layout[key] = {**layout[key], **value}
        else:
            layout[key] = value
    return layout


def _names_on_y(layout: dict) -> None:
    """Horizontal bars named on the y axis: the margin grows to fit the names, and the
    axis title stands off beyond them (short names under a fixed margin sat beneath the
    title)."""
    layout["yaxis"]["automargin"] = True
    layout["yaxis"]["title"]["standoff"] = 12


DAY_AXIS = {"type": "date", "tickformat": "%b %-d", "automargin": True}


def daily_cost(days: Sequence[date], series: dict[str, Sequence[Decimal]], currency: str) -> dict:
    """Daily cost, stacked by pricing category."""
    data = [
        {
            "type": "bar", "name": NAMES[category], "x": [d.isoformat() for d in days],
            "y": [_money(v) for v in values], "marker": {"color": COLORS[category]},
            "hovertemplate": "%{y} " + currency + "<extra>" + NAMES[category] + "</extra>",
        }
        for category, values in series.items()
    ]
    layout = _layout("Daily cost by pricing category", "Day (UTC)", f"Cost ({currency})", barmode="stack", xaxis=DAY_AXIS,
                     yaxis={"rangemode": "tozero"})  # no cost yet draws 0 at the bottom, not a -1 … 1 axis
    return {"data": data, "layout": layout, "config": CONFIG}


def breakdown(rows: Sequence[tuple[str, Decimal]], title: str, what: str, currency: str, limit: int = 15) -> dict:
    """Horizontal bars, largest first; the tail beyond ``limit`` folds into "others"."""
    rows = sorted(rows, key=lambda r: (-r[1], r[0]))
    if len(rows) > limit:
        rest = sum((v for _, v in rows[limit - 1 :]), Decimal(0))
        rows = [*rows[: limit - 1], (f"{len(rows) - limit + 1} others", rest)]
    rows = list(reversed(rows))
    data = [{
        "type": "bar", "orientation": "h", "y": [label for label, _ in rows], "x": [_money(v) for _, v in rows],
        "marker": {"color": PALETTE["accent"]}, "hovertemplate": "%{x} " + currency + "<extra>%{y}</extra>",
    }]
    layout = _layout(title, f"Cost ({currency})", what, hovermode="closest", showlegend=False)
    _names_on_y(layout)
    return {"data": data, "layout": layout, "config": CONFIG}


def coverage(days: Sequence[CoverageDay]) -> dict:
    """Reserved instances' GPU-hours covered by commitments, beyond them, and commitment unused."""
    x = [d.day.isoformat() for d in days]
    traces = [
        ("Covered by reservations", [str(d.covered_hours) for d in days], COLORS["committed"]),
        ("Beyond reservations (on-demand)", [str(d.overflow_hours) for d in days], COLORS["standard"]),
        ("Unused commitment", [str(d.unused_hours) for d in days], DIM),
    ]
    data = [{"type": "bar", "name": name, "x": x, "y": y, "marker": {"color": color}} for name, y, color in traces]
    layout = _layout("Reserved coverage", "Day (UTC)", "GPU-hours", barmode="stack", xaxis=DAY_AXIS)
    return {"data": data, "layout": layout, "config": CONFIG}


def idle(rows: Sequence[IdleRow], currency: str, limit: int = 12) -> dict:
    """Per instance: cost of active GPU-seconds, of idle ones, and cost without telemetry."""
    rows = list(reversed(list(rows)[:limit]))
    names = [r.name for r in rows]
    active = [_money(r.cost - r.idle_cost) if r.idle_cost is not None else "0.00" for r in rows]
    wasted = [_money(r.idle_cost) if r.idle_cost is not None else "0.00" for r in rows]
    unknown = [_money(r.cost) if r.idle_cost is None else "0.00" for r in rows]
    data = [
        {"type": "bar", "orientation": "h", "name": "Active", "y": names, "x": active, "marker": {"color": PALETTE["ok"]}},
        {"type": "bar", "orientation": "h", "name": "Idle (< 10% real activity)", "y": names, "x": wasted,
         "marker": {"color": PALETTE["bad"]}},
        {"type": "bar", "orientation": "h", "name": "No telemetry", "y": names, "x": unknown,
         "marker": {"color": DIM}},
    ]
    layout = _layout("Idle cost by instance", f"Cost ({currency})", "Instance", barmode="stack", hovermode="y unified")
    _names_on_y(layout)
    return {"data": data, "layout": layout, "config": CONFIG}


def forecast(
    days: Sequence[date], cumulative: Sequence[Decimal], month_end: date, outlook: Forecast | None,
    budget: Decimal | None, currency: str,
) -> dict:
    """Spend so far this month, the month-end forecast with its interval, and the budget."""
    x = [d.isoformat() for d in days]
    data = [{"type": "scatter", "mode": "lines+markers", "name": "Spent (cumulative)", "x": x,
             "y": [_money(v) for v in cumulative], "line": {"color": PALETTE["accent"]}}]
    if outlook is not None and days:
        last = x[-1]
        end = month_end.isoformat()
        data += [
            {"type": "scatter", "mode": "lines", "name": "Forecast interval (80%)", "x": [last, end, end, last],
             "y": [_money(cumulative[-1]), _money(outlook.high), _money(outlook.low), _money(cumulative[-1])],
             "fill": "toself", "fillcolor": alpha(PALETTE["warn"], 0.18), "line": {"width": 0}, "hoverinfo": "skip"},
            {"type": "scatter", "mode": "lines+markers", "name": "Forecast", "x": [last, end],
             "y": [_money(cumulative[-1]), _money(outlook.point)], "line": {"color": PALETTE["warn"], "dash": "dash"}},
        ]
    if budget is not None and days:
        data.append({"type": "scatter", "mode": "lines", "name": "Budget", "x": [x[0], month_end.isoformat()],
                     "y": [_money(budget), _money(budget)], "line": {"color": PALETTE["bad"], "dash": "dot"}})
    layout = _layout("Month to date and forecast", "Day (UTC)", f"Cost ({currency})", xaxis=DAY_AXIS)
    return {"data": data, "layout": layout, "config": CONFIG}


def spot_range(sku: str, times: Sequence[datetime], prices: Sequence[Decimal], on_demand: Decimal | None) -> dict:
    """A small chart for the launch form: the spot price of ``sku`` as steps over the
    recent days, with the on-demand price for reference."""
    x = [t.strftime("%Y-%m-%d %H:%M:%S") for t in times]
    data = [{"type": "scatter", "mode": "lines", "name": "Spot", "x": x, "y": [str(p) for p in prices],
             "line": {"color": COLORS["dynamic"], "shape": "hv", "width": 1.5},
             "hovertemplate": "%{y}/h<extra>Spot</extra>"}]
    if on_demand is not None and x:
        data.append({"type": "scatter", "mode": "lines", "name": "On-demand", "x": [x[0], x[-1]],
                     "y": [str(on_demand), str(on_demand)], "line": {"color": COLORS["standard"], "dash": "dot"},
                     "hovertemplate": "%{y}/h<extra>On-demand</extra>"})
    layout = _layout("", "Time (UTC)", f"{sku} per GPU-hour", hovermode="x unified",
                     height=220, margin={"l": 55, "r": 10, "t": 24, "b": 40},
                     legend={"orientation": "h", "y": 1.0, "x": 1, "xanchor": "right", "yanchor": "bottom"},
                     xaxis={"type": "date", "tickformat": "%b %-d"}, yaxis={"rangemode": "tozero"})
    del layout["title"]
    return {"data": data, "layout": layout, "config": CONFIG}
