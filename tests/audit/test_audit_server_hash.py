"""On PostgreSQL the database computes each chain hash itself (``audit_append``,
``audit_seal``); verification recomputes them in Python. The two spellings of the
canonical JSON must agree byte for byte on any text a record can hold."""

from datetime import UTC, datetime, timedelta

import pytest
from audit_support import on_postgres
from django.db import connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit import chain, hashing, recording, sealer
from audit.models import AuditEvent
from audit.verification import verify
from console import request_context as context

pytestmark = on_postgres

# Any text PostgreSQL can hold: no NUL, no lone surrogates.
_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
_awkward = st.sampled_from(['"', "\\", "\n", "\r\t", "\x01\x1f", "\x7f", "é", "\u2028", "😀", "'", "</", ""])
_field = st.one_of(_text, st.lists(_awkward | _text, max_size=4).map("".join))
_ip = st.sampled_from([None, "10.0.0.1", "::1", "2001:db8::8a2e:370:7334", "::ffff:1.2.3.4", "192.168.1.255"])


@pytest.mark.django_db
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seq=st.integers(1, 10**12),
    micros=st.integers(0, 10**15),
    strings=st.lists(_field, min_size=9, max_size=9),
    team=st.none() | st.integers(1, 10**9),
    ip=_ip,
    details=st.dictionaries(_text, _field | st.integers() | st.floats(allow_nan=False) | st.none(), max_size=3),
)
def test_the_database_spells_the_canonical_json_as_python_does(seq, micros, strings, team, ip, details):
    when = datetime(1990, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)
    actor_id, actor_name, action, target_type, target_id, user_agent, request_id, role, target_name = strings
    details_text = chain.canonical_details(details)
    prev = "ab" * 32
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT canonical, audit_link(canonical, %s), host(%s::inet) FROM (SELECT audit_canonical("
            "%s, %s::timestamptz, 'user', %s, %s, %s, %s, %s, %s, 'success', %s::inet, %s, %s, %s, %s, %s)"
            " AS canonical) c",
            [prev, ip, seq, when, actor_id, actor_name, team, action, target_type, target_id, ip,
             user_agent, request_id, role, target_name, details_text],
        )  # fmt: skip
        canonical, digest, host = cursor.fetchone()
    expected = chain.canonical_text(
        seq, chain.iso_time(when), "user", actor_id, actor_name, team, action, target_type, target_id,
        "success", host, user_agent, request_id, role, target_name, details_text,
    )  # fmt: skip
    assert canonical.encode() == expected
    assert digest == chain.link(expected, prev)


def test_hostile_records_appended_and_sealed_by_the_database_verify(db):
    hostile = 'a"b\\c\u2028é😀\x7f</script>'
    with context.bound(context.RequestContext(source_ip="2001:db8::8a2e:370:7334", user_agent=hostile)):
        written = recording.record_event(
            actor=hostile, action="x.y", target_type="t", target_id=hostile, target_name=hostile,
            details={hostile: [hostile, 1.5e-7, 10**20, None, {"\n": "\t"}]},
        )  # fmt: skip
    stored = AuditEvent.objects.get(seq=written.seq)
    assert stored.hash == written.hash == hashing.chain_hash(stored, stored.prev_hash)
    # An IPv4-mapped address is hashed in the database's spelling, which verification reads.
    with context.bound(context.RequestContext(source_ip="::ffff:1.2.3.4")):
        written = recording.record_event(actor="system", action="x.mapped")
    # a pending record, sealed by audit_seal
    pending = AuditEvent.objects.create(
        actor_type="system", actor_name=hostile, action="x.pending", details={hostile: hostile},
        user_agent=hostile, source_ip="2001:db8::1",
    )  # fmt: skip
    assert sealer.seal_pending() == 1
    pending.refresh_from_db()
    assert pending.seq == written.seq + 1 and pending.prev_hash == written.hash
    assert verify().valid


@pytest.mark.django_db(transaction=True)
def test_an_append_outside_a_transaction_commits_and_is_sealed_at_once():
    assert not connection.in_atomic_block
    event = recording.record_event(actor="system", action="x.alone", details={"n": 1})
    assert event.seq is not None and event.pk is not None
    with transaction.atomic():
        again = recording.record_event(actor="system", action="x.alone")
    assert again.seq == event.seq + 1
    assert AuditEvent.objects.filter(seq__isnull=True).count() == 0
    assert verify().valid
