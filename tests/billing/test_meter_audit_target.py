"""The audit row of a metering run names what it rebuilt: the charges of its UTC days,
with the window as its id; the audit log never shows an empty "#"."""

from billing_support import at

from audit.models import AuditEvent
from billing import meter_runs


def test_the_meter_row_names_its_window(play, bob, acme, ops, alice, client):
    play(bob, acme, runs=[(at(3, 10), at(3, 11), "terminate")])
    meter_runs.meter_window(actor=ops, start=at(3, 10), end=at(3, 12), now=at(3, 12))
    event = AuditEvent.objects.get(action="billing.meter")
    assert (event.target_type, event.target_id) == ("billing.charge", "2026-11-03/2026-11-04")
    assert event.target_name == "charges of 2026-11-03 to 2026-11-04 (UTC days, end excluded)"
    client.force_login(ops)
    page = client.get(f"/audit/{event.seq}/").content.decode()
    assert "billing.charge #2026-11-03/2026-11-04" in page


def test_a_row_without_a_target_id_shows_no_hash(client, ops):
    from audit.recording import record_event

    event = record_event(actor="system", action="billing.export", target_type="billing.charge")
    client.force_login(ops)
    listing = client.get("/audit/").content.decode()
    row = next(r for r in listing.split("<tr") if "billing.export" in r)
    assert " #<" not in row and "#</span>" not in row
    assert "#</span>" not in client.get(f"/audit/{event.seq}/").content.decode()
