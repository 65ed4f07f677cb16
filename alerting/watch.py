"""Rule evaluation on ingest: each agent connection keeps, per rule and GPU, since when
the condition holds; the database is written only when an alert opens, every
``ALERT_REFRESH_S`` while it fires, and when it resolves; the rules are read again only
when they changed (rule_cache). XID rules are evaluated on agent events the same way.
Alerts are attributed to the holder of the GPU at the sample's time: a GPU handed to
another tenant closes the old tenant's alert and opens one for the new tenant.
Monitoring's ingest reaches this through its alert hooks (``AlertingConfig.ready``).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db.models import F, Q

from instances.models import Gpu, GpuSlice, Instance

from . import rule_cache, rules
from .alerts import Condition, raise_alert, resolve_keys, thresholds
from .models import ACTIVE_STATES, Alert, AlertKind, AlertRule


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
            from monitoring.queries import device_basis

            gpu = Gpu.objects.select_related("model").get(pk=holder.gpu_id)
            piece = GpuSlice.objects.select_related("profile").filter(pk=holder.slice_id).first()
            precision = Instance.objects.filter(pk=instance_id).values_list("precision", flat=True).first()
            self.bases[key] = device_basis(gpu.model, precision or "bf16", piece.profile if piece else None)
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
        resolve_keys([key], now=_at(t), why=why)

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
