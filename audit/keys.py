"""The signing key: an Ed25519 private key read from the environment (``AUDIT_SIGNING_KEY``,
PEM text) or a file (``AUDIT_SIGNING_KEY_FILE``, created with mode 0600 on first use when
absent), never from the database. The database lists only public keys, each with the time
it was first used and, once another key replaced it, the time it was retired; a key is
rotated by pointing the setting at a new private key."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction
from django.utils import timezone

from . import signing
from .models import SigningKey

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Signer:
    private: Ed25519PrivateKey
    fingerprint: str
    public_pem: str


@lru_cache(maxsize=4)
def _signer(pem: bytes) -> Signer:
    private = signing.load_private(pem)
    return Signer(private, signing.fingerprint(private.public_key()), signing.public_pem(private))


def _pem() -> bytes:
    text = getattr(settings, "AUDIT_SIGNING_KEY", "")
    if text:
        return text.encode()
    path = Path(settings.AUDIT_SIGNING_KEY_FILE)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it a moment ago
            return path.read_bytes()
        with os.fdopen(fd, "wb") as handle:
            handle.write(signing.new_private_pem())
        logger.warning("created a new audit signing key at %s; keep a copy of it", path)
    return path.read_bytes()


_listed: set[str] = set()


def signer(*, recheck: bool = True) -> Signer:
    """The current private key, its public key listed in the database (a new one retires
    the one before it). ``recheck=False``: trust that a key this process listed once is
    still listed (a head per sealed batch need not ask each time; verification asks)."""
    try:
        current = _signer(_pem())
    except ValueError as exc:
        source = (
            "AUDIT_SIGNING_KEY" if settings.AUDIT_SIGNING_KEY else settings.AUDIT_SIGNING_KEY_FILE
        )
        raise ImproperlyConfigured(f"audit signing key ({source}): {exc}") from None
    if recheck or current.fingerprint not in _listed:
        if not SigningKey.objects.filter(fingerprint=current.fingerprint).exists():
            _register(current)
        _listed.add(current.fingerprint)
    return current


def _register(current: Signer) -> None:
    now = timezone.now()
    try:
        with transaction.atomic():
            SigningKey.objects.create(
                fingerprint=current.fingerprint, public_pem=current.public_pem, valid_from=now
            )
            SigningKey.objects.filter(valid_until__isnull=True).exclude(
                fingerprint=current.fingerprint
            ).update(valid_until=now)
    except IntegrityError:  # another worker listed it first
        pass


@dataclass(frozen=True)
class PublicKey:
    fingerprint: str
    key: Ed25519PublicKey
    pem: str
    valid_from: object
    valid_until: object

    def as_dict(self) -> dict:
        return {
            "fingerprint": self.fingerprint,
            "public_key_pem": self.pem,
            "valid_from": self.valid_from.isoformat() if self.valid_from else None,
            "valid_until": self.valid_until.isoformat() if self.valid_until else None,
        }


def public_keys() -> dict[str, PublicKey]:
    """Every public key that ever signed, by fingerprint, current one included."""
    signer()
    found = {}
    for row in SigningKey.objects.order_by("valid_from"):
        if signing.fingerprint(row.public_pem) != row.fingerprint:
            logger.error("audit signing key %s: its PEM has another fingerprint", row.fingerprint)
            continue
        key = signing.load_public(row.public_pem)
        found[row.fingerprint] = PublicKey(
            row.fingerprint, key, row.public_pem, row.valid_from, row.valid_until
        )
    return found
