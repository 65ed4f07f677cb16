"""The one way alerts open, update and resolve, and the evaluation of alert rules.

An alert's ``key`` names one condition of one holder, e.g. ``r12:GPU-…:i40`` (rule 12
on that GPU while instance 40 held it); the database keeps at most one active alert
per key (a partial unique index), so concurrent ingest writers never open two.

Rules (models.AlertRule, metrics in rules.py) are evaluated three ways:
- on ingest, by ``Watch``: each agent connection keeps, per rule and GPU, since when
  the condition holds; the database is written only when an alert opens, every
  ``ALERT_REFRESH_S`` while it fires, and when it resolves; it reads the rules again
  only when they changed (rule_cache);
- on agent events (XID errors), also by ``Watch``;
- by the periodic task (``evaluate``): agent silence, idle-but-billed GPUs, stale
  ingest alerts, audit verification failures and spot preemption notices.
Alerts are attributed to the holder of the GPU at the sample's time: a GPU handed to
another tenant closes the old tenant's alert and opens one for the new tenant.
Opening and resolving are audited (``alert.open``, ``alert.resolve``), pushed live as
``alert`` events, and queued for the owner's notification channels (notify.py).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Avg, Count, F, Min, Q
from django.utils import timezone

from audit.models import Verification
from audit.recording import record_event
from console.live import FLEET_GROUP, host_group, instance_group, publish_on_commit, team_group
from instances.models import Gpu, GpuSlice, Instance, NoticeStatus, PreemptionNotice, State

from . import notify, rule_cache, rules
from .activity import real_activity
from .models import (
    ACTIVE_STATES,
    AgentState,
    Alert,
    AlertKind,
    AlertRule,
    AlertState,
    Category,
    Sample,
    Severity,
)


def setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


def thresholds() -> dict[str, float]:
    return {
        "xid_quiet_s": setting("ALERT_XID_QUIET_S", 3600),
        "refresh_s": setting("ALERT_REFRESH_S", 30),
        "stale_s": setting("ALERT_STALE_S", 300),
        # Only a safety net where the cache is shared; with each process's own cache,
        # how soon another process's rule change applies here.
        "rules_max_age_s": setting("ALERT_RULES_MAX_AGE_S", 300 if rule_cache.shared() else 5),
    }


@dataclass
class Condition:
    """One alert-worthy condition that holds now."""

    key: str
    message: str
    value: float | None = None
    threshold: float | None = None
    host_id: int | None = None
    gpu_id: int | None = None
    uuid: str = ""
    instance_id: int | None = None
    team_id: int | None = None
    rule_id: int | None = None
    severity: str = Severity.WARNING
    category: str = Category.TELEMETRY


# --- open / update / resolve ---------------------------------------------------------


def announce(alert: Alert) -> None:
    groups = [FLEET_GROUP]
    if alert.team_id:
        groups.append(team_group(alert.team_id))
    if alert.instance_id:
        groups.append(instance_group(alert.instance_id))
    if alert.host_id:
        groups.append(host_group(alert.host_id))
    publish_on_commit(groups, "alert", alert_data(alert))


def alert_data(alert: Alert) -> dict:
    return {
        "id": alert.pk,
        "kind": alert.kind,
        "category": alert.category,
        "severity": alert.severity,
        "state": alert.state,
        "message": alert.message,
        "uuid": alert.uuid,
        "instance": alert.instance_id,
        "team": alert.team_id,
        "host": alert.host_id,
        "rule": alert.rule_id,
        "value": alert.value,
        "opened_at": alert.opened_at.isoformat(),
        "updated_at": alert.updated_at.isoformat(),
        "resolved_at": alert.resolved_at.isoformat() if alert.resolved_at else None,
    }


def _refresh(condition: Condition, now: datetime) -> Alert | None:
    alert = Alert.objects.select_for_update().filter(key=condition.key, state__in=ACTIVE_STATES).first()
    if alert is not None:
        alert.message = condition.message[:300]
        alert.value = condition.value
        alert.count += 1
        alert.updated_at = max(now, alert.updated_at)
        alert.save(update_fields=["message", "value", "count", "updated_at"])
    return alert


@transaction.atomic
def raise_alert(kind: str, condition: Condition, *, now: datetime | None = None) -> Alert:
    """Open an alert for ``condition``, or refresh the active one with the same key."""
    now = now or timezone.now()
    alert = _refresh(condition, now)
    if alert is not None:
        return alert
    try:
        with transaction.atomic():
            alert = Alert.objects.create(
                kind=kind, category=condition.category, severity=condition.severity, rule_id=condition.rule_id,
                key=condition.key, message=condition.message[:300], value=condition.value,
                threshold=condition.threshold, host_id=condition.host_id, gpu_id=condition.gpu_id,
                uuid=condition.uuid, instance_id=condition.instance_id, team_id=condition.team_id,
                opened_at=now, updated_at=now,
            )
    except IntegrityError:
        # Another writer opened this key between our look and our insert (the unique
        # index waited for its commit); theirs is the alert.
        alert = _refresh(condition, now)
        if alert is None:
            raise
        return alert
    record_event(
        actor="system", action="alert.open", target=alert, team=alert.team_id,
        details={"kind": kind, "key": alert.key, "message": alert.message, "value": alert.value,
                 "rule": alert.rule_id, "severity": alert.severity},
    )
    announce(alert)
    notify.enqueue(alert, now=now)
    return alert


@transaction.atomic
def resolve_alert(alert: Alert, *, now: datetime | None = None, why: str = "", actor="system") -> Alert:
    alert = Alert.objects.select_for_update().get(pk=alert.pk)
    if alert.state == AlertState.RESOLVED:
        return alert
    now = now or timezone.now()
    alert.state = AlertState.RESOLVED
    alert.resolved_at = alert.updated_at = max(now, alert.opened_at)
    if getattr(actor, "is_authenticated", False):
        alert.resolved_by = actor
    alert.save(update_fields=["state", "resolved_at", "updated_at", "resolved_by"])
    record_event(
        actor=actor, action="alert.resolve", target=alert, team=alert.team_id,
        details={"kind": alert.kind, "key": alert.key, "why": why},
    )
    announce(alert)
    notify.enqueue_resolved(alert, now=now)
    return alert


def is_active(key: str) -> bool:
    return Alert.objects.filter(key=key, state__in=ACTIVE_STATES).exists()


def resolve_key(key: str, *, now: datetime | None = None, why: str = "") -> None:
    for alert in Alert.objects.filter(key=key, state__in=ACTIVE_STATES):
        resolve_alert(alert, now=now, why=why)


def reconcile(kind: str, conditions: list[Condition], *, now: datetime | None = None, scope: Q | None = None) -> None:
    """Make the active alerts of ``kind`` (within ``scope``) match ``conditions``."""
    now = now or timezone.now()
    firing = {c.key: c for c in conditions}
    for condition in firing.values():
        raise_alert(kind, condition, now=now)
    active = Alert.objects.filter(kind=kind, state__in=ACTIVE_STATES).exclude(key__in=list(firing))
    if scope is not None:
        active = active.filter(scope)
    for alert in active:
        resolve_alert(alert, now=now, why="condition cleared")


def resolve_others(kind: str, keep: set[str], *, now: datetime | None = None, why: str) -> None:
    for alert in Alert.objects.filter(kind=kind, state__in=ACTIVE_STATES).exclude(key__in=list(keep)):
        resolve_alert(alert, now=now, why=why)


# --- rule evaluation on ingest ---------------------------------------------------------


def rule_key(rule_id: int, device: str, instance_id: int | None) -> str:
    return f"r{rule_id}:{device}:i{instance_id or 0}"


@dataclass(frozen=True)
class RuleRef:
    """What ``Watch`` needs of a rule, read once per refresh."""

    id: int
    name: str
    metric: str
    comparison: str
    threshold: float
    hold_s: int
    severity: str
    team_id: int | None
    instance_id: int | None


@dataclass(frozen=True)
class Plan:
    """The rules ``Watch.observe`` applies to one device for one holder (``ids``), and of
    those it checks per reading, each with its reader and comparison."""

    ids: frozenset
    checks: tuple


@dataclass
class Track:
    """One rule on one device for one holder: since when the condition holds."""

    key: str
    rule: RuleRef
    instance_id: int | None
    team_id: int | None
    since: float
    firing: bool = False
    false_since: float | None = None
    refreshed: float = 0.0


@dataclass
class Watch:
    """Ingest-time rule evaluation for one host's agent connection (see module doc)."""

    host_id: int
    host_name: str
    fleet: dict[str, list[RuleRef]] = field(default_factory=dict)  # device -> operators' rules
    teams: dict[int, list[RuleRef]] = field(default_factory=dict)  # team -> its rules
    tracks: dict[str, dict[int, Track]] = field(default_factory=dict)  # device -> rule id -> track
    actions: list[tuple] = field(default_factory=list)
    loaded_at: float = -math.inf
    loaded_teams: frozenset = frozenset()
    version: str | None = None  # of the rules read (rule_cache)
    resumed: bool = False
    bases: dict = field(default_factory=dict)  # (device, instance) -> flops.Basis | None
    plans: dict = field(default_factory=dict)  # (device, instance, team) -> Plan, made once per rule read
    devices: dict = field(default_factory=dict)  # what the rules were read for: uuid -> ingest.Device
    refresh_s: float = 30.0

    def load(self, devices: dict, teams: set[int]) -> None:
        """(Re)read the rules that apply to this host's devices when they changed (their
        version, rule_cache), when a team appears among the holders or the devices
        change, and every ALERT_RULES_MAX_AGE_S in case a change went unannounced."""
        load_many([(self, devices, teams)])

    def _due(self, devices: dict, teams: set[int], version: str, max_age_s: float) -> frozenset | None:
        """The teams to read rules for when this watch must read them again, else None."""
        current = version == self.version and time.monotonic() - self.loaded_at < max_age_s
        same = devices is self.devices or devices == self.devices  # models included
        if current and teams <= self.loaded_teams and same:
            return None
        return frozenset(teams) | self.loaded_teams if current else frozenset(teams)

    def _assign(self, devices: dict, teams: frozenset, rows: list[tuple], version: str) -> None:
        """Keep the rules of ``rows`` that apply to this host (rows as ``load_many`` reads
        them, after it read ``version``)."""
        models = {device.gpu_id: device.model_id for device in devices.values()}
        present = set(models.values())
        self.fleet = {uuid: [] for uuid in devices}
        self.teams = {}
        for rule in rows:
            ref = RuleRef(*rule[:9])
            host_id, model_id = rule[9], rule[10]
            if model_id is not None and model_id not in present:
                continue
            if ref.team_id is not None:
                if ref.team_id in teams:
                    self.teams.setdefault(ref.team_id, []).append(ref)
                continue
            if host_id is not None and host_id != self.host_id:
                continue
            for uuid, device in devices.items():
                if model_id is None or models.get(device.gpu_id) == model_id:
                    self.fleet[uuid].append(ref)
        self.loaded_at, self.loaded_teams, self.version = time.monotonic(), teams, version
        self.devices = devices
        self.bases, self.plans, self.refresh_s = {}, {}, thresholds()["refresh_s"]

    def _resume(self) -> None:
        """After a (re)connect: alerts this host's rules left open are tracked again,
        so they resolve when their condition clears."""
        _resume_many([self])

    def _refs(self) -> dict[int, RuleRef]:
        return {r.id: r for rs in [*self.fleet.values(), *self.teams.values()] for r in rs}

    def _track_open(self, rows) -> None:
        refs = self._refs()
        for key, rule_id, uuid, instance_id, team_id in rows:
            rule = refs.get(rule_id)
            if rule is None:
                continue
            if rules.METRICS[rule.metric].how != rules.INGEST:
                continue
            self.tracks.setdefault(uuid, {})[rule_id] = Track(
                key=key, rule=rule, instance_id=instance_id, team_id=team_id, since=-math.inf, firing=True,
                refreshed=time.monotonic(),
            )
        self.resumed = True

    def applicable(self, device: str, instance_id: int | None, team_id: int | None) -> list[RuleRef]:
        found = self.fleet.get(device, [])
        if team_id is not None and team_id in self.teams:
            found = found + [r for r in self.teams[team_id] if r.instance_id in (None, instance_id)]
        return found

    def observe(self, device: str, holder, t: float, m, instance_id: int | None, team_id: int | None) -> None:
        """One reading of ``device`` at ``t`` (its metrics ``m``, a ``protocol.Metrics``) held
        by (instance_id, team_id) then."""
        plan = self.plans.get((device, instance_id, team_id))
        if plan is None:
            plan = self.plans[(device, instance_id, team_id)] = self._plan(device, holder, instance_id, team_id)
        tracks = self.tracks.get(device)
        if tracks and not tracks.keys() <= plan.ids:
            self._drop_inapplicable(tracks, plan.ids, t)
        for rule, reader, compare in plan.checks:
            value = reader(m)
            if value is None:
                continue
            if not tracks or rule.id not in tracks:
                if not compare(value, rule.threshold):
                    continue  # nothing holds and nothing is tracked: what most readings find
            self._step(device, holder, rule, t, value, instance_id, team_id)
            tracks = self.tracks.get(device)

    def _plan(self, device: str, holder, instance_id: int | None, team_id: int | None) -> Plan:
        """What ``observe`` checks of a reading of ``device`` held by (instance, team):
        the rules that apply, each with its reader and comparison."""
        candidates = self.applicable(device, instance_id, team_id)
        checks = []
        for rule in candidates:
            if rule.metric in rules.READERS:
                reader = rules.READERS[rule.metric]
            elif rule.metric == "tflops_est":
                reader = functools.partial(rules.read, "tflops_est", basis=self.basis(device, holder, instance_id))
            else:
                continue  # evaluated on events or periodically
            checks.append((rule, reader, rules.COMPARE[rule.comparison]))
        return Plan(frozenset(r.id for r in candidates), tuple(checks))

    def basis(self, device: str, holder, instance_id: int | None):
        """The TFLOP/s estimate's basis of ``device`` at its holder's precision (read once
        per rule refresh)."""
        key = (device, instance_id)
        if key not in self.bases:
            from .queries import device_basis

            gpu = Gpu.objects.select_related("model").get(pk=holder.gpu_id)
            piece = GpuSlice.objects.select_related("profile").filter(pk=holder.slice_id).first()
            precision = Instance.objects.filter(pk=instance_id).values_list("precision", flat=True).first()
            self.bases[key] = device_basis(gpu.model.name, precision or "bf16", piece.profile if piece else None)
        return self.bases[key]

    def _drop_inapplicable(self, tracks: dict[int, Track], ids: frozenset, t: float) -> None:
        for rule_id in [r for r in tracks if r not in ids]:
            track = tracks.pop(rule_id)
            if track.firing:
                self.actions.append(("resolve", track.key, t, "the rule no longer applies to this GPU's holder"))

    def _step(self, device, holder, rule: RuleRef, t, value, instance_id, team_id) -> None:
        tracks = self.tracks.setdefault(device, {})
        track = tracks.get(rule.id)
        if track is not None and track.instance_id != instance_id:
            # Handed over: the old holder's alert ends, the new holder's is its own.
            tracks.pop(rule.id)
            if track.firing:
                self.actions.append(("resolve", track.key, t, "the GPU changed hands"))
            track = None
        if rules.holds(rule.comparison, value, rule.threshold):
            if track is None:
                track = tracks[rule.id] = Track(
                    key=rule_key(rule.id, device, instance_id), rule=rule, instance_id=instance_id,
                    team_id=team_id, since=t,
                )
            track.false_since = None
            if not track.firing and t - track.since >= rule.hold_s:
                track.firing, track.refreshed = True, time.monotonic()
                self.actions.append(("open", track, device, holder, t, value))
            elif track.firing and time.monotonic() - track.refreshed >= self.refresh_s:
                track.refreshed = time.monotonic()
                self.actions.append(("refresh", track.key, t, value))
            return
        if track is None:
            return
        if not track.firing:
            tracks.pop(rule.id)
            return
        if track.false_since is None:
            track.false_since = t
        if t - track.false_since >= rule.hold_s:
            tracks.pop(rule.id)
            self.actions.append(("resolve", track.key, t, "condition cleared"))

    def event(self, device: str, holder, t: float, event: dict, instance_id, team_id) -> None:
        """An agent event: XID rules open (or refresh) an alert per XID code."""
        if event.get("kind") != "xid":
            return
        code = event.get("code")
        for rule in self.applicable(device, instance_id, team_id):
            if rule.metric != "xid" or not rules.holds(rule.comparison, code, rule.threshold):
                continue
            key = f"{rule_key(rule.id, device, instance_id)}:xid{code}"
            message = f"XID {code} on {device} ({self.host_name}): {event.get('message') or 'no detail'}"
            self.actions.append(("xid", rule, key, device, holder, t, code, message, instance_id, team_id))

    def apply(self) -> None:
        """Write what the observations decided (inside the ingest transaction)."""
        actions, self.actions = self.actions, []
        for action in actions:
            getattr(self, f"_apply_{action[0]}")(*action[1:])

    def _apply_open(self, track: Track, device, holder, t, value) -> None:
        rule = track.rule
        raise_alert(rules.METRICS[rule.metric].kind, Condition(
            key=track.key, value=round(value, 2), threshold=rule.threshold, host_id=self.host_id,
            gpu_id=holder.gpu_id, uuid=device, instance_id=track.instance_id,
            team_id=rule.team_id, rule_id=rule.id, severity=rule.severity,
            message=f"{rule.name}: {device} on {self.host_name} at {value:.4g} "
                    f"({rules.describe(rule.metric, rule.comparison, rule.threshold, rule.hold_s)}).",
        ), now=_at(t))

    def _apply_refresh(self, key, t, value) -> None:
        Alert.objects.filter(key=key, state__in=ACTIVE_STATES).update(
            value=round(value, 2), count=F("count") + 1, updated_at=_at(t)
        )

    def _apply_resolve(self, key, t, why) -> None:
        resolve_key(key, now=_at(t), why=why)

    def _apply_xid(self, rule: RuleRef, key, device, holder, t, code, message, instance_id, team_id) -> None:
        raise_alert(AlertKind.XID, Condition(
            key=key, value=code, host_id=self.host_id, gpu_id=holder.gpu_id, uuid=device, instance_id=instance_id,
            team_id=rule.team_id, rule_id=rule.id, severity=rule.severity, message=f"{rule.name}: {message}",
        ), now=_at(t))

    def forget(self) -> None:
        """After a failed write: start again from what the database holds."""
        self.actions, self.tracks, self.resumed, self.loaded_at, self.version = [], {}, False, -math.inf, None


def load_many(items: list[tuple[Watch, dict, set[int]]]) -> None:
    """``Watch.load`` for the watches of many hosts (one ingest flush): the rules of every
    watch due a re-read come from one query, and the rules' version is read once for
    all of them (before the rules, so a change committed meanwhile is read next time).
    ``devices`` maps a device's UUID to what ``ingest.read_devices`` knows of it
    (``gpu_id`` and ``model_id``)."""
    if not items:
        return
    version, max_age_s = rule_cache.version(), thresholds()["rules_max_age_s"]
    due = []
    for watch, devices, teams in items:
        wanted = watch._due(devices, teams, version, max_age_s)
        if wanted is not None:
            due.append((watch, devices, wanted))
    if not due:
        return
    hosts = {watch.host_id for watch, _, _ in due}
    teams = set().union(*(wanted for _, _, wanted in due))
    models = {device.model_id for _, devices, _ in due for device in devices.values()}
    watched = [m for m, spec in rules.METRICS.items() if spec.how in (rules.INGEST, rules.EVENT)]
    found = AlertRule.objects.filter(enabled=True, metric__in=watched).filter(
        Q(team__isnull=True, host__isnull=True) | Q(team__isnull=True, host_id__in=hosts) | Q(team_id__in=teams)
    ).filter(Q(gpu_model__isnull=True) | Q(gpu_model_id__in=models - {None}))
    rows = list(found.values_list("id", "name", "metric", "comparison", "threshold", "hold_s", "severity",
                                  "team_id", "instance_id", "host_id", "gpu_model_id"))
    for watch, devices, wanted in due:
        watch._assign(devices, wanted, rows, version)
    _resume_many([watch for watch, _, _ in due if not watch.resumed])


def _resume_many(watches: list[Watch]) -> None:
    """``Watch._resume`` for many hosts' watches: the alerts their rules left open, in one query."""
    if not watches:
        return
    rule_ids = {rule_id for watch in watches for rule_id in watch._refs()}
    by_host: dict[int, list] = {}
    active = Alert.objects.filter(host_id__in={w.host_id for w in watches}, state__in=ACTIVE_STATES,
                                  rule_id__in=rule_ids)
    for host_id, *row in active.values_list("host_id", "key", "rule_id", "uuid", "instance_id", "team_id"):
        by_host.setdefault(host_id, []).append(row)
    for watch in watches:
        watch._track_open(by_host.get(watch.host_id, []))


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


# --- periodic rules --------------------------------------------------------------------


def _periodic_rules(metric: str) -> list[AlertRule]:
    return list(AlertRule.objects.filter(enabled=True, metric=metric))


def agent_silent_conditions(now: datetime) -> list[tuple[AlertRule, list[Condition]]]:
    out = []
    agents = list(AgentState.objects.filter(last_seen_at__isnull=False).select_related("host"))
    held = _hosts_by_team()
    for rule in _periodic_rules("agent_silent"):
        found = []
        for state in agents:
            if not _host_in_scope(rule, state.host_id, held):
                continue
            silent = (now - state.last_seen_at).total_seconds()
            if not rules.holds(rule.comparison, silent, rule.threshold):
                continue
            found.append(Condition(
                key=f"r{rule.pk}:host{state.host_id}", host_id=state.host_id, threshold=rule.threshold,
                value=round(silent), team_id=rule.team_id, rule_id=rule.pk, severity=rule.severity,
                message=f"{rule.name}: the agent on {state.host.name} has sent nothing since "
                        f"{state.last_seen_at:%Y-%m-%d %H:%M:%S} UTC.",
            ))
        out.append((rule, found))
    return out


def _hosts_by_team() -> dict[int, set[int]]:
    held: dict[int, set[int]] = {}
    for team_id, host_id in Gpu.objects.filter(team__isnull=False).values_list("team_id", "host_id"):
        held.setdefault(team_id, set()).add(host_id)
    for team_id, host_id in GpuSlice.objects.filter(team__isnull=False).values_list("team_id", "gpu__host_id"):
        held.setdefault(team_id, set()).add(host_id)
    return held


def _host_in_scope(rule: AlertRule, host_id: int, held: dict[int, set[int]]) -> bool:
    if rule.team_id is not None:
        return host_id in held.get(rule.team_id, set())
    if rule.host_id is not None:
        return rule.host_id == host_id
    if rule.gpu_model_id is not None:
        return Gpu.objects.filter(host_id=host_id, model_id=rule.gpu_model_id).exists()
    return True


def idle_conditions(now: datetime) -> list[tuple[AlertRule, list[Condition]]]:
    """Per GPU (or slice) of each running instance, busy instances included: real
    activity over the rule's hold time, from raw samples that cover the whole window."""
    out = []
    by_window: dict[int, list[dict]] = {}
    for rule in _periodic_rules("idle_billed"):
        window = max(rule.hold_s, 5)
        if window not in by_window:
            by_window[window] = _activity_rows(now, window)
        found = []
        for row in by_window[window]:
            if not _instance_in_scope(rule, row) or not rules.holds(rule.comparison, row["activity"], rule.threshold):
                continue
            found.append(Condition(
                key=rule_key(rule.pk, row["uuid"], row["instance_id"]), instance_id=row["instance_id"],
                team_id=rule.team_id, host_id=row["host_id"], gpu_id=row["gpu_id"], uuid=row["uuid"],
                value=round(row["activity"], 2), threshold=rule.threshold, rule_id=rule.pk, severity=rule.severity,
                message=f"{rule.name}: {row['uuid']} of {row['name']} was billed but at most "
                        f"{row['activity']:.1f}% busy (real activity) for the last {_span(window)}.",
            ))
        out.append((rule, found))
    return out


def _span(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def spot_max_conditions(now: datetime) -> list[tuple[AlertRule, list[Condition]]]:
    """Per running spot instance with a max price: the spot price in effect as a
    percentage of it."""
    from instances.preemption import price_text, spot_against_max

    out, rows = [], None
    for rule in _periodic_rules("spot_vs_max"):
        rows = spot_against_max(now=now) if rows is None else rows
        found = []
        for instance, spot in rows:
            pct = float(spot / instance.max_price * 100)
            row = {"team_id": instance.team_id, "instance_id": instance.pk, "host_id": instance.host_id,
                   "model_id": instance.gpu_model_id}
            if not _instance_in_scope(rule, row) or not rules.holds(rule.comparison, pct, rule.threshold):
                continue
            found.append(Condition(
                key=f"r{rule.pk}:i{instance.pk}", instance_id=instance.pk, team_id=instance.team_id,
                host_id=instance.host_id, value=round(pct, 1), threshold=rule.threshold, rule_id=rule.pk,
                severity=rule.severity, category=Category.BILLING,
                message=f"{rule.name}: the spot price of {instance.sku} is {price_text(spot)}/GPU-hour at "
                        f"{now:%H:%M} UTC, {pct:.0f}% of {instance.name}'s max price {price_text(instance.max_price)}.",
            ))
        out.append((rule, found))
    return out


def _instance_in_scope(rule: AlertRule, row: dict) -> bool:
    if rule.team_id is not None:
        return row["team_id"] == rule.team_id and rule.instance_id in (None, row["instance_id"])
    if rule.host_id is not None:
        return row["host_id"] == rule.host_id
    return rule.gpu_model_id in (None, row["model_id"])


def _activity_rows(now: datetime, window_s: float) -> list[dict]:
    since = now - timedelta(seconds=window_s)
    running = Instance.objects.filter(state=State.RUNNING, state_changed_at__lte=since)
    rows = (
        Sample.objects.filter(time__gt=since, time__lte=now, instance__in=running)
        .values("instance_id", "instance__team_id", "instance__name", "gpu_id", "slice_id", "gpu__uuid",
                "slice__uuid", "gpu__host_id", "gpu__model_id")
        .annotate(first=Min("time"), n=Count("id"), util=Avg("gpu_util"), occupancy=Avg("sm_occupancy_pct"),
                  tensor=Avg("tensor_active_pct"), dram=Avg("dram_bw_util_pct"))
    )
    # A window is covered when the first reading is within a tenth of it of its start.
    slack = timedelta(seconds=max(window_s * 0.1, 2.0))
    out = []
    for row in rows:
        activity = real_activity(row["util"], row["occupancy"], row["tensor"], row["dram"])
        if activity is None or row["first"] - since > slack:
            continue
        out.append({
            "instance_id": row["instance_id"], "team_id": row["instance__team_id"], "name": row["instance__name"],
            "gpu_id": row["gpu_id"], "uuid": row["slice__uuid"] or row["gpu__uuid"], "host_id": row["gpu__host_id"],
            "model_id": row["gpu__model_id"], "activity": activity,
        })
    return out


def resolve_stale(now: datetime) -> None:
    """Ingest-rule alerts no reading refreshed for ALERT_STALE_S: their GPU stopped
    reporting (agent silence has its own rule)."""
    ingest_metrics = [m for m, spec in rules.METRICS.items() if spec.how == rules.INGEST]
    cutoff = now - timedelta(seconds=thresholds()["stale_s"])
    stale = Alert.objects.filter(state__in=ACTIVE_STATES, rule__metric__in=ingest_metrics, updated_at__lt=cutoff)
    for alert in stale:
        resolve_alert(alert, now=now, why="no fresh readings")


def expire_xid(now: datetime) -> None:
    quiet = timedelta(seconds=thresholds()["xid_quiet_s"])
    for alert in Alert.objects.filter(kind=AlertKind.XID, state__in=ACTIVE_STATES, updated_at__lt=now - quiet):
        resolve_alert(alert, now=now, why="no new XID error")


def audit_conditions() -> list[Condition]:
    """The latest audit verification failed: operators (and auditors' teams) must know."""
    latest = Verification.objects.order_by("-id").first()
    if latest is None or latest.valid:
        return []
    return [Condition(
        key="audit_verify", category=Category.AUDIT, severity=Severity.CRITICAL, value=latest.first_broken_seq,
        message=f"Audit log verification failed at record {latest.first_broken_seq}: {latest.reason}"[:300],
    )]


def preemption_conditions() -> list[Condition]:
    pending = PreemptionNotice.objects.filter(status=NoticeStatus.PENDING).select_related("instance")
    return [Condition(
        key=f"preempt:{n.pk}", category=Category.BILLING, severity=Severity.WARNING, team_id=n.team_id,
        instance_id=n.instance_id, host_id=n.instance.host_id,
        # The reason quotes the spot price when the notice was given, which may have
        # moved since: the time says which price it is.
        message=f"Spot instance {n.instance.name} will be preempted at {n.preempt_at:%Y-%m-%d %H:%M:%S} UTC"
                f"{': ' + n.reason if n.reason else ''} (notice given at {n.notice_at:%H:%M:%S} UTC).",
    ) for n in pending]


def evaluate(now: datetime | None = None) -> None:
    """Run every periodic rule once."""
    now = now or timezone.now()
    for kind, found in ((AlertKind.AGENT_SILENT, agent_silent_conditions(now)), (AlertKind.IDLE, idle_conditions(now)),
                        (AlertKind.SPOT_MAX, spot_max_conditions(now))):
        for rule, conditions in found:
            reconcile(kind, conditions, now=now, scope=Q(rule=rule))
    # Alerts of rules since disabled or deleted end too.
    ended = Alert.objects.filter(state__in=ACTIVE_STATES).filter(
        Q(rule__enabled=False) | Q(rule__isnull=True, key__regex=r"^r[0-9]+:")
    )
    for alert in ended:
        resolve_alert(alert, now=now, why="the rule was disabled or deleted")
    resolve_stale(now)
    expire_xid(now)
    reconcile(AlertKind.AUDIT, audit_conditions(), now=now)
    reconcile(AlertKind.PREEMPTION, preemption_conditions(), now=now)
