"""Alert notifications: grouping, delivery to email / signed webhooks / Slack, retries.

``enqueue`` runs in the transaction that opens an alert and only writes rows: the
alert joins the pending notification of its group on each of its owner's channels
(a rule on one host, so a host with eight hot GPUs or a flapping GPU sends one
message), or starts one due after ``ALERT_GROUP_WAIT_S``; a group that was sent less
than ``ALERT_GROUP_INTERVAL_S`` ago waits for the rest of that interval. When an alert
resolves, ``enqueue_resolved`` puts it in its group's next message on each channel that
was sent its firing: that message says "resolved" (``status`` in a webhook's body) when
every alert in it has resolved, and counts firing and resolved ones otherwise. ``dispatch``
(the periodic ``deliver_notifications`` task, never the ingest path) sends what is
due, logs each attempt as a ``Delivery`` and retries failures with exponential
backoff up to ``ALERT_DELIVERY_ATTEMPTS``.

Webhook and Slack targets must resolve to public addresses (no loopback, private,
link-local, reserved, multicast or unspecified ones, nor IPv6 addresses carrying such an
IPv4 address: mapped, 6to4, Teredo, NAT64, IPv4-compatible) unless the host is listed in
``ALERT_WEBHOOK_ALLOW_HOSTS``. The name is resolved once per attempt and the connection
goes to the address that was checked (the name only in Host and TLS SNI), so a second
DNS answer cannot move it; redirects are not followed, so no other address is reached.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ipaddress
import json
import socket
import ssl
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from .models import (
    SEVERITY_RANK,
    Alert,
    AlertState,
    ChannelKind,
    Delivery,
    Notification,
    NotificationChannel,
    NotificationStatus,
    Silence,
)

SIGNATURE_HEADER = "X-GPUConsole-Signature"


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


# --- grouping ---------------------------------------------------------------------------


def group_key(alert: Alert) -> str:
    if alert.rule_id:
        return f"rule{alert.rule_id}:host{alert.host_id or 0}"
    return f"{alert.kind}:team{alert.team_id or 0}"


def owner_team_id(alert: Alert) -> int | None:
    """Whose channels hear about ``alert``: the rule's owner, else the alert's team
    (None: the operators)."""
    if alert.rule_id:
        return alert.rule.team_id
    return alert.team_id


def channels_for(alert: Alert) -> list[NotificationChannel]:
    team_id = owner_team_id(alert)
    rank = SEVERITY_RANK[alert.severity]
    found = NotificationChannel.objects.filter(enabled=True, team_id=team_id) if team_id else (
        NotificationChannel.objects.filter(enabled=True, team__isnull=True)
    )
    return [c for c in found if SEVERITY_RANK[c.min_severity] <= rank]


def enqueue(alert: Alert, *, now: datetime) -> None:
    """A new alert joins its group's next message on each of its owner's channels."""
    for channel in channels_for(alert):
        _join(channel, alert, now)


def enqueue_resolved(alert: Alert, *, now: datetime) -> None:
    """A resolved alert rides in its group's next message on each channel that was sent
    its firing (one still waiting to send shows it resolved anyway)."""
    told = (
        Notification.objects.filter(alerts=alert, test=False, status=NotificationStatus.SENT)
        .values_list("channel_id", flat=True).distinct()
    )
    for channel in NotificationChannel.objects.filter(pk__in=list(told), enabled=True):
        _join(channel, alert, now)


def _join(channel: NotificationChannel, alert: Alert, now: datetime) -> None:
    wait = timedelta(seconds=_setting("ALERT_GROUP_WAIT_S", 5))
    interval = timedelta(seconds=_setting("ALERT_GROUP_INTERVAL_S", 300))
    key = group_key(alert)
    pending = Notification.objects.filter(
        channel=channel, group_key=key, status=NotificationStatus.PENDING, test=False
    ).first()
    if pending is None:
        pending = _start(channel, key, now, wait, interval)
    pending.alerts.add(alert)


def _start(channel, key: str, now: datetime, wait: timedelta, interval: timedelta) -> Notification:
    last = (
        Notification.objects.filter(channel=channel, group_key=key, test=False, sent_at__isnull=False)
        .order_by("-sent_at").values_list("sent_at", flat=True).first()
    )
    send_after = now + wait
    if last is not None and last + interval > send_after:
        send_after = last + interval
    try:
        with transaction.atomic():
            return Notification.objects.create(
                channel=channel, team_id=channel.team_id, group_key=key, created_at=now, send_after=send_after
            )
    except IntegrityError:
        return Notification.objects.get(channel=channel, group_key=key, status=NotificationStatus.PENDING, test=False)


# --- dispatch ---------------------------------------------------------------------------


def dispatch(*, now: datetime | None = None, limit: int = 50) -> int:
    """Send the notifications that are due; returns how many were attempted."""
    now = now or timezone.now()
    lease = timedelta(seconds=60)
    with transaction.atomic():
        due = Notification.objects.filter(status=NotificationStatus.PENDING, send_after__lte=now)
        ids = list(due.select_for_update(skip_locked=True).order_by("send_after").values_list("id", flat=True)[:limit])
        # Claimed: another dispatcher skips them until the lease runs out.
        Notification.objects.filter(pk__in=ids).update(send_after=now + lease)
    for notification in Notification.objects.filter(pk__in=ids).select_related("channel", "team"):
        attempt(notification, now=now)
    return len(ids)


def attempt(notification: Notification, *, now: datetime | None = None) -> Delivery | None:
    now = now or timezone.now()
    alerts = list(notification.alerts.select_related("host", "team", "instance", "rule").order_by("opened_at", "id"))
    if not notification.test:
        alerts = [a for a in alerts if not silenced(a, now)]
        if not alerts:
            Notification.objects.filter(pk=notification.pk).update(status=NotificationStatus.SUPPRESSED)
            return None
    result = send(notification.channel, notification, alerts)
    number = notification.attempts + 1
    delivery = Delivery.objects.create(
        notification=notification, channel=notification.channel, team_id=notification.team_id, time=now,
        attempt=number, ok=result.ok, status_code=result.status, error=result.error[:300],
        duration_ms=result.ms,
    )
    if result.ok:
        fields = {"status": NotificationStatus.SENT, "sent_at": now, "last_error": ""}
    elif number >= _setting("ALERT_DELIVERY_ATTEMPTS", 5) or notification.test:
        fields = {"status": NotificationStatus.FAILED, "last_error": result.error[:300]}
    else:
        backoff = _setting("ALERT_DELIVERY_BACKOFF_S", 10) * 2 ** (number - 1)
        fields = {"send_after": now + timedelta(seconds=backoff), "last_error": result.error[:300]}
    Notification.objects.filter(pk=notification.pk).update(attempts=number, **fields)
    return delivery


def silenced(alert: Alert, now: datetime) -> bool:
    live = Silence.objects.filter(starts_at__lte=now, ends_at__gt=now)
    match = Q(key=alert.key)
    if alert.rule_id:
        match |= Q(rule_id=alert.rule_id, key="")
    return live.filter(match).exists()


# --- messages ---------------------------------------------------------------------------


def alert_payload(alert: Alert) -> dict:
    return {
        "id": alert.pk, "kind": alert.kind, "category": alert.category, "severity": alert.severity,
        "state": alert.state, "key": alert.key, "message": alert.message, "value": alert.value,
        "threshold": alert.threshold, "uuid": alert.uuid or None,
        "host": alert.host.name if alert.host_id else None,
        "instance": alert.instance.name if alert.instance_id else None,
        "team": alert.team.name if alert.team_id else None,
        "rule": alert.rule.name if alert.rule_id else None,
        "opened_at": alert.opened_at.isoformat(),
        "resolved_at": alert.resolved_at.isoformat() if alert.resolved_at else None,
    }


def status_of(alerts: list[Alert]) -> str:
    """``firing`` while any alert of the message is active, else ``resolved``."""
    return "resolved" if all(a.state == AlertState.RESOLVED for a in alerts) else "firing"


def summary(alerts: list[Alert], *, test: bool) -> str:
    if test:
        return "GPU Console test notification: this channel works."
    firing = [a for a in alerts if a.state != AlertState.RESOLVED]
    tag = f"[{firing[0].severity}]" if firing else "[resolved]"
    if len(alerts) == 1:
        return f"{tag} {alerts[0].message}"
    head = alerts[0].rule.name if alerts[0].rule_id else alerts[0].get_kind_display()
    where = alerts[0].host.name if alerts[0].host_id else ""
    resolved = len(alerts) - len(firing)
    count = f"{len(firing)} firing, {resolved} resolved" if firing and resolved else f"{len(alerts)} alerts"
    return f"{tag} {head}: {count}{' on ' + where if where else ''}"


def lines(alerts: list[Alert]) -> list[str]:
    """One line per alert, the resolved ones saying when."""
    return [
        f"• {a.message}" + (f" (resolved {a.resolved_at:%Y-%m-%d %H:%M:%S} UTC)" if a.resolved_at else "")
        for a in alerts
    ]


def body(notification: Notification, alerts: list[Alert]) -> bytes:
    data = {
        "version": 1,
        "test": notification.test,
        "status": status_of(alerts),
        "group": notification.group_key,
        "channel": notification.channel.name,
        "summary": summary(alerts, test=notification.test),
        "alerts": [alert_payload(a) for a in alerts],
        "sent_at": timezone.now().isoformat(),
    }
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def sign(secret: str, payload: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()


@dataclass
class Result:
    ok: bool
    status: int | None = None
    error: str = ""
    ms: int = 0


def send(channel: NotificationChannel, notification: Notification, alerts: list[Alert]) -> Result:
    started = time.monotonic()
    try:
        if channel.kind == ChannelKind.EMAIL:
            result = _send_email(channel, notification, alerts)
        elif channel.kind == ChannelKind.SLACK:
            text = summary(alerts, test=notification.test)
            details = lines(alerts) if len(alerts) > 1 or status_of(alerts) == "resolved" else []
            result = post(channel.target, json.dumps({"text": "\n".join([text, *details])}).encode(), {})
        else:
            payload = body(notification, alerts)
            result = post(channel.target, payload, {SIGNATURE_HEADER: sign(channel.secret, payload)})
    except Exception as exc:  # noqa: BLE001 - any failure is logged on the delivery and retried
        result = Result(False, error=f"{type(exc).__name__}: {exc}")
    result.ms = round((time.monotonic() - started) * 1000)
    return result


def _send_email(channel, notification, alerts) -> Result:
    text = "\n".join([summary(alerts, test=notification.test), ""] + lines(alerts))
    sent = send_mail(f"[GPU Console] {summary(alerts, test=notification.test)}"[:150], text, None,
                     emails(channel.target), fail_silently=False)
    return Result(bool(sent), error="" if sent else "the mail backend sent nothing")


def emails(target: str) -> list[str]:
    found = [a.strip() for a in target.split(",") if a.strip()]
    for address in found:
        validate_email(address)
    return found


# --- HTTP with the SSRF check -------------------------------------------------------------


class Refused(ValueError):
    """A webhook target the deployment does not allow."""


def allowed_hosts() -> list[str]:
    raw = getattr(settings, "ALERT_WEBHOOK_ALLOW_HOSTS", "") or ""
    items = raw if isinstance(raw, list | tuple) else raw.split(",")
    return [h.strip().lower() for h in items if h.strip()]


def _allowed(host: str, address: str, allow: list[str]) -> bool:
    if host.lower() in allow:
        return True
    ip = ipaddress.ip_address(address)
    for item in allow:
        try:
            if ip in ipaddress.ip_network(item, strict=False):
                return True
        except ValueError:
            continue
    return False


# Prefixes that carry an IPv4 address in their last 32 bits: the well-known NAT64 prefix
# (a DNS64 resolver answers 64:ff9b::a.b.c.d for an IPv4-only host) and the deprecated
# IPv4-compatible form (::a.b.c.d). The local-use NAT64 prefix is the operator's own.
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries: mapped (::ffff:a.b.c.d), 6to4
    (2002:AABB:CCDD::), Teredo (server and client), NAT64 and IPv4-compatible."""
    found = [a for a in (ip.ipv4_mapped, ip.sixtofour) if a is not None]
    found += list(ip.teredo or ())
    if ip in NAT64 or ip in IPV4_COMPATIBLE:
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def _kind(ip) -> str | None:
    """Which special range ``ip`` is in, by ipaddress's own properties; None: public."""
    for kind in ("unspecified", "loopback", "link_local", "multicast", "private", "reserved", "site_local"):
        if getattr(ip, f"is_{kind}", False):
            return kind.replace("_", "-")
    return None if ip.is_global else "non-global"


def forbidden(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why a webhook may not connect to ``ip`` (a sentence), or None when it may: a
    loopback, private, link-local, reserved, multicast or unspecified address, or one
    that carries such an IPv4 address inside an IPv6 one."""
    if ip.version == 6 and not (ip.is_loopback or ip.is_unspecified):
        if ip in LOCAL_NAT64:
            return f"{ip} is a local-use NAT64 address"
        if ip in IPV4_COMPATIBLE:
            return f"{ip} is an IPv4-compatible address (deprecated, ::/96)"
        for inner in embedded_ipv4(ip):
            if (kind := _kind(inner)) is not None:
                return f"{ip} carries {inner}, {_a(kind)} address"
        if ip in NAT64 or ip.ipv4_mapped is not None:
            return None  # the IPv4 address it carries is public (ipaddress calls the prefix itself reserved)
    kind = _kind(ip)
    return None if kind is None else f"{ip} is {_a(kind)} address"


def _a(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def check_target(url: str) -> tuple[str, str, int, str, str]:
    """(scheme, host, port, address to connect to, path) for ``url``, or Refused. The
    name is resolved once, here; every address it resolves to must be allowed, and the
    caller connects to the one returned (never resolving the name again)."""
    try:
        parts = urlsplit(url)
        parts.hostname  # noqa: B018 (a bracketed host that is no IPv6 address raises here)
    except ValueError:
        raise Refused("The target is not a valid URL.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused("The target must be an http:// or https:// URL with a host.")
    if parts.username or parts.password:
        raise Refused("Put no credentials in the URL; webhooks are signed instead.")
    host = parts.hostname
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise Refused("The port is not a number between 0 and 65535.") from None
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise Refused(f"{host} does not resolve ({exc}).") from None
    addresses = sorted({ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos}, key=str)
    if not addresses:
        raise Refused(f"{host} does not resolve.")
    allow = allowed_hosts()
    for ip in addresses:
        reason = forbidden(ip)
        if reason is not None and not _allowed(host, str(ip), allow):
            raise Refused(
                f"{host} resolves to {reason}; webhooks go to public addresses only "
                "(list the host in ALERT_WEBHOOK_ALLOW_HOSTS to allow it)."
            )
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, host, port, str(addresses[0]), path


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, host, port, address, timeout):
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self):
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host, port, address, timeout):
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self):
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


def post(url: str, payload: bytes, headers: dict) -> Result:
    scheme, host, port, address, path = check_target(url)
    timeout = _setting("ALERT_WEBHOOK_TIMEOUT_S", 5)
    conn = (_PinnedHTTPS if scheme == "https" else _PinnedHTTP)(host, port, address, timeout)
    try:
        conn.request("POST", path, body=payload, headers={
            "Content-Type": "application/json", "User-Agent": "gpuconsole-alerts/1", **headers,
        })
        response = conn.getresponse()
        response.read(4096)
    finally:
        conn.close()
    ok = 200 <= response.status < 300
    error = "" if ok else f"HTTP {response.status} {response.reason}"
    if 300 <= response.status < 400:  # a redirect could lead anywhere: give the final URL instead
        error += "; redirects are not followed, set the channel's target to the final URL"
    return Result(ok, status=response.status, error=error)
