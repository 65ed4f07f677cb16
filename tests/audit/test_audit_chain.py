import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from audit import chain, hashing, recording
from audit.models import AuditEvent


def test_each_event_follows_the_one_before(events):
    first, second, third = events(3)
    assert first.prev_hash == chain.GENESIS_HASH
    assert (second.seq, second.prev_hash) == (first.seq + 1, first.hash)
    assert (third.seq, third.prev_hash) == (second.seq + 1, second.hash)


def test_the_hash_covers_what_the_database_hands_back(events, acme):
    written = recording.record_event(
        actor="system", action="x.y", team=acme, details={"b": [1, 2.5], "a": "é"}
    )
    stored = AuditEvent.objects.get(seq=written.seq)
    assert hashing.chain_hash(stored, stored.prev_hash) == stored.hash == written.hash


def test_awkward_values_survive_the_round_trip(db):
    details = {
        "big": 1e20, "nan": math.nan, "tiny": 1.5e-7, "nul": "a\x00b", "surrogate": "\ud800",
        "nested": {"z": [None, True, {"y": 3}]}, "when": __import__("datetime").datetime(2026, 1, 2),
    }  # fmt: skip
    written = recording.record_event(actor="system", action="x.y", details=details)
    stored = AuditEvent.objects.get(seq=written.seq)
    assert hashing.chain_hash(stored, stored.prev_hash) == stored.hash


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    details=st.dictionaries(st.text(), _json, max_size=4),
    name=st.text(),
    team=st.none() | st.integers(1, 10**6),
    role=st.sampled_from(["", "admin", "operator"]),
)
def test_the_canonical_form_is_sorted_compact_json(details, name, team, role):
    fields = {
        "seq": 7, "time": "2026-12-02T10:00:00.000001+00:00", "actor_type": "user", "actor_id": "3",
        "actor_name": name, "team_id": team, "action": "a.b", "target_type": "t", "target_id": "1",
        "outcome": "success", "source_ip": None, "user_agent": name, "request_id": "r", "details": details,
        "actor_role": role, "target_name": name,
    }  # fmt: skip
    # Fields added later are hashed only when set, so older events keep their hashes.
    hashed = {k: v for k, v in fields.items() if k not in ("actor_role", "target_name") or v}
    expected = json.dumps(hashed, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8", "surrogatepass"
    )
    assert chain.canonical_row(*(fields[f] for f in chain.FIELDS)) == expected
