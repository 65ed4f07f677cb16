"""Ed25519 signatures over tree heads, with no Django import: the server signs with a
private key kept outside the database, anyone checks with the public key alone.

A signed tree head says "the log held ``size`` events, the Merkle root of their leaves
was ``root``, event #size had chain hash ``chain_hash``, at ``time``"; the signed bytes
are the text below, one field a line. A key is named by its fingerprint, the SHA-256 of
its raw 32-byte public key in hex.
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

HEAD_PREFIX = "gpuconsole-audit-tree-head:v2"


def head_message(size: int, root_hex: str, chain_hash: str, time: str) -> bytes:
    return f"{HEAD_PREFIX}\n{int(size)}\n{root_hex}\n{chain_hash}\n{time}\n".encode()


def new_private_pem() -> bytes:
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def load_private(pem: bytes) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("the audit signing key must be an Ed25519 private key (PEM, PKCS#8)")
    return key


def load_public(pem: str | bytes) -> Ed25519PublicKey:
    key = serialization.load_pem_public_key(pem.encode() if isinstance(pem, str) else pem)
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("not an Ed25519 public key")
    return key


def public_pem(private: Ed25519PrivateKey) -> str:
    return (
        private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def fingerprint(public: Ed25519PublicKey | str | bytes) -> str:
    if not isinstance(public, Ed25519PublicKey):
        public = load_public(public)
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def sign(private: Ed25519PrivateKey, message: bytes) -> str:
    return base64.b64encode(private.sign(message)).decode()


def verify(public: Ed25519PublicKey | str | bytes, message: bytes, signature: str) -> bool:
    if not isinstance(public, Ed25519PublicKey):
        public = load_public(public)
    try:
        public.verify(base64.b64decode(signature or "", validate=True), message)
    except (InvalidSignature, ValueError):
        return False
    return True
