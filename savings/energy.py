"""Energy and carbon of instances and teams, from NVML's total-energy counter.

The agent reads each device's counter (millijoules since the driver loaded); the rollups
keep its increase over each bucket (``energy_mj_delta``), so energy between two readings
is exact, not power × time. A device-hour with no minute rollups (past their retention)
is read from its hourly rollup. Facility energy is IT energy × the region's PUE, and
carbon is facility energy × the grid's intensity, both set by operators per region
(``RegionFootprint``); a region with none set shows IT energy and no carbon.
MIG and vGPU slices report no energy of their own: their GPU's counter is the host's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Min, Sum
from django.utils import timezone

from audit.recording import record_event
from instances.models import Instance
from monitoring.models import Rollup1h, Rollup1m

from .models import RegionFootprint

MJ_PER_KWH = 3.6e9
_PLAIN = re.compile(r"[0-9]{1,6}(\.[0-9]{1,6})?")
HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Footprint:
    it_kwh: float
    pue: float | None
    facility_kwh: float
    kg_co2e: float | None


def energy_mj(rollups_filter: dict, start: datetime, end: datetime, group: tuple[str, ...]) -> dict[tuple, float]:
    """{group values + (region id,): millijoules} of the rollups matching ``rollups_filter``
    whose buckets start in [start, end)."""
    keys = (*group, "gpu__host__region_id")
    minutes = Rollup1m.objects.filter(**rollups_filter, bucket__gte=start, bucket__lt=end,
                                      energy_mj_delta__isnull=False)
    out: dict[tuple, float] = {}
    for row in minutes.values(*keys).annotate(mj=Sum("energy_mj_delta")).order_by():
        out[tuple(row[k] for k in keys)] = row["mj"] or 0.0
    first = dict(minutes.values("gpu_id").annotate(t=Min("bucket")).order_by().values_list("gpu_id", "t"))
    hours = Rollup1h.objects.filter(**rollups_filter, bucket__gte=start, bucket__lt=end, energy_mj_delta__isnull=False)
    for *values, gpu_id, bucket, mj in hours.values_list(*keys, "gpu_id", "bucket", "energy_mj_delta").iterator():
        if gpu_id in first and bucket + HOUR > first[gpu_id]:
            continue  # the minute rollups hold this hour
        key = tuple(values)
        out[key] = out.get(key, 0.0) + (mj or 0.0)
    return out


def footprint(mj: float, region: RegionFootprint | None) -> Footprint:
    kwh = mj / MJ_PER_KWH
    if region is None:
        return Footprint(kwh, None, kwh, None)
    facility = kwh * float(region.pue)
    return Footprint(kwh, float(region.pue), facility, facility * float(region.grid_g_co2e_per_kwh) / 1000)


def add(a: Footprint, b: Footprint) -> Footprint:
    carbon = None if a.kg_co2e is None and b.kg_co2e is None else (a.kg_co2e or 0) + (b.kg_co2e or 0)
    pue = b.pue if a is ZERO else (a.pue if a.pue == b.pue else None)  # None: several regions' PUEs
    return Footprint(a.it_kwh + b.it_kwh, pue, a.facility_kwh + b.facility_kwh, carbon)


ZERO = Footprint(0.0, None, 0.0, None)


def by_instance(team_id: int, start: datetime, end: datetime, instance_id: int | None = None) -> dict[int, Footprint]:
    """{instance id: its footprint} for the team's instances (or only ``instance_id``) over [start, end)."""
    regions = {f.region_id: f for f in RegionFootprint.objects.all()}
    where = {"team_id": team_id} if instance_id is None else {"team_id": team_id, "instance_id": instance_id}
    out: dict[int, Footprint] = {}
    for (held_by, region_id), mj in energy_mj(where, start, end, ("instance_id",)).items():
        if held_by is not None:
            out[held_by] = add(out.get(held_by, ZERO), footprint(mj, regions.get(region_id)))
    return out


def by_job(per_instance: dict[int, Footprint]) -> dict[int, Footprint]:
    """{job id: its runs' instances' footprint} from ``by_instance``'s answer."""
    jobs = Instance.objects.filter(pk__in=list(per_instance), job_run__isnull=False)
    out: dict[int, Footprint] = {}
    for instance_id, job_id in jobs.values_list("pk", "job_run__job_id"):
        out[job_id] = add(out.get(job_id, ZERO), per_instance[instance_id])
    return out


def total(footprints) -> Footprint:
    """The sum of ``footprints``, added in their order."""
    out = ZERO
    for fp in footprints:
        out = add(out, fp)
    return out


def team_total(team_id: int, start: datetime, end: datetime) -> Footprint:
    return total(by_instance(team_id, start, end).values())


def _decimal(value, field: str, low: Decimal, high: Decimal, places: str) -> Decimal:
    text = str(value)
    number = Decimal(text) if _PLAIN.fullmatch(text) else None
    if number is None or not low <= number <= high or number != number.quantize(
            Decimal(places)):
        raise ValidationError({field: f"{field} is a number from {low} to {high}, at most {places.count('0')} "
                                      "decimal places."})
    return number


@transaction.atomic
def set_footprint(*, actor, region, pue, grid_g_co2e_per_kwh) -> RegionFootprint:
    """Set a region's PUE (1.00–3.00) and grid carbon intensity (0–2000 g CO2e per kWh)."""
    errors = {}
    values = {}
    for field, value, low, high, places in (("pue", pue, Decimal("1"), Decimal("3"), "0.01"),
                                            ("grid_g_co2e_per_kwh", grid_g_co2e_per_kwh, Decimal("0"),
                                             Decimal("2000"), "0.1")):
        try:
            values[field] = _decimal(value, field, low, high, places)
        except ValidationError as exc:
            errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    found, _ = RegionFootprint.objects.update_or_create(
        region=region, defaults={**values, "updated_by": actor if getattr(actor, "pk", None) else None,
                                 "updated_at": timezone.now()})
    record_event(actor=actor, action="savings.footprint.set", target=region,
                 details={"pue": str(values["pue"]), "grid_g_co2e_per_kwh": str(values["grid_g_co2e_per_kwh"])})
    return found


# --- per charge row (the FOCUS export's x_EnergyKWh and x_CarbonKgCO2e) ------------------


def charge_energy(rows: list[dict]) -> dict[int, tuple[float, float | None]]:
    """{charge id: (kWh at the GPUs, kg CO2e or None)} for charge rows (id, instance_id,
    period_start, period_end, consumed_seconds). Each bucket's energy goes to the one
    charge period of its instance that holds the bucket's start (the earliest, should two
    overlap), shared among that period's rows by consumed seconds, so the rows add up to
    the energy the counters measured while the instance was billed."""
    periods: dict[int, list[tuple]] = {}
    for row in rows:
        if row["instance_id"] is not None:
            periods.setdefault(row["instance_id"], []).append((row["period_start"], row["period_end"]))
    if not periods:
        return {}
    periods = {iid: sorted(set(p)) for iid, p in periods.items()}
    start = min(p[0][0] for p in periods.values())
    end = max(e for p in periods.values() for _, e in p)
    regions = {f.region_id: f for f in RegionFootprint.objects.all()}
    groups: dict[tuple, list[float]] = {}  # (instance, period start, period end) -> [kWh, kg or nan]
    for iid, bucket, region_id, mj in _buckets(list(periods), start, end):
        period = next(((s, e) for s, e in periods[iid] if s <= bucket < e), None)
        if period is None:
            continue
        fp = footprint(mj, regions.get(region_id))
        group = groups.setdefault((iid, *period), [0.0, 0.0, True])
        group[0] += fp.it_kwh
        group[1] += fp.kg_co2e or 0.0
        group[2] = group[2] and fp.kg_co2e is not None
    return _share(rows, groups)


def _buckets(instance_ids: list[int], start: datetime, end: datetime):
    """(instance id, bucket start, region id, mJ) per instance, bucket and region."""
    minutes = Rollup1m.objects.filter(instance_id__in=instance_ids, bucket__gte=start, bucket__lt=end,
                                      energy_mj_delta__isnull=False)
    yield from minutes.values_list("instance_id", "bucket", "gpu__host__region_id").annotate(
        mj=Sum("energy_mj_delta")).order_by().iterator(chunk_size=5000)
    first = dict(minutes.values("gpu_id").annotate(t=Min("bucket")).order_by().values_list("gpu_id", "t"))
    hours = Rollup1h.objects.filter(instance_id__in=instance_ids, bucket__gte=start, bucket__lt=end,
                                    energy_mj_delta__isnull=False)
    for iid, bucket, region_id, gpu_id, mj in hours.values_list(
            "instance_id", "bucket", "gpu__host__region_id", "gpu_id", "energy_mj_delta").iterator(chunk_size=5000):
        if gpu_id not in first or bucket + HOUR <= first[gpu_id]:
            yield iid, bucket, region_id, mj or 0.0


def _share(rows: list[dict], groups: dict[tuple, list]) -> dict[int, tuple[float, float | None]]:
    members: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (row["instance_id"], row["period_start"], row["period_end"])
        if key in groups:
            members.setdefault(key, []).append(row)
    out = {}
    for key, mine in members.items():
        kwh, kg, known = groups[key]
        seconds = sum(r["consumed_seconds"] for r in mine)
        for r in mine:
            share = r["consumed_seconds"] / seconds if seconds else 1 / len(mine)
            out[r["id"]] = (kwh * share, kg * share if known else None)
    return out


def billed_kwh(rows: list[dict]) -> float:
    """The GPU energy the counters measured while these charge rows' instances were billed,
    read apart from ``charge_energy``: the union of each instance's charge periods, summed
    in the database (``reconcile_costs`` compares the two)."""
    spans: dict[int, list[list]] = {}
    for row in sorted(rows, key=lambda r: (r["instance_id"] or 0, r["period_start"])):
        if row["instance_id"] is None:
            continue
        mine = spans.setdefault(row["instance_id"], [])
        if mine and row["period_start"] <= mine[-1][1]:
            mine[-1][1] = max(mine[-1][1], row["period_end"])
        else:
            mine.append([row["period_start"], row["period_end"]])
    mj = 0.0
    for iid, merged in spans.items():
        for start, end in merged:
            mj += sum(energy_mj({"instance_id": iid}, start, end, ()).values())
    return mj / MJ_PER_KWH
