"""``manage.py meter``: UTC days metered again from the command line, bad flags refused
with a clear message and nothing written."""

from datetime import timedelta
from decimal import Decimal

import pytest
from billing_support import at
from django.core.management import CommandError, call_command
from django.utils import timezone

from audit.models import AuditEvent
from billing import price_changes
from billing.models import Charge, Price, UnratedUsage


def _meter(*args):
    from io import StringIO

    out = StringIO()
    call_command("meter", *args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize("args, message", [
    (["--start", "2026-13-01"], "is not a day like 2026-11-01"),
    (["--start", "yesterday"], "is not a day like 2026-11-01"),
    (["--start", "2026-11-05", "--end", "2026-11-05"], "--end must be after --start"),
    (["--start", "2026-11-05", "--end", "2026-11-01"], "--end must be after --start"),
    (["--start", "2190-01-01"], "is not in the past"),
    (["--start", "2026-11-01", "--end", "2999-01-01"], "Give a time between"),
    (["--start", "0001-01-01"], "Give a time between"),
])
def test_bad_flags_are_refused_and_nothing_is_metered(db, args, message):
    with pytest.raises(CommandError, match=message):
        _meter(*args)
    assert not AuditEvent.objects.filter(action="billing.meter").exists()


def test_a_window_is_metered_again_once_its_sku_is_priced(play, bob, acme, ops):
    play(bob, acme, runs=[(at(3, 0), at(3, 2), "terminate")], model="H200-141GB")
    Price.objects.filter(sku="H200-141GB").delete()
    out = _meter("--start", "2026-11-03", "--end", "2026-11-04")
    assert "metered 2026-11-03 to 2026-11-04" in out and "0 charges, 1 held unrated" in out
    assert "price its SKU, then meter again" in out
    price_changes.set_price(actor=ops, sku="H200-141GB", kind="on_demand", hourly=Decimal("3.00"),
                            effective_from=at(1), now=at(1))
    out = _meter("--start", "2026-11-03", "--end", "2026-11-04")
    assert "1 usage records, 1 charges, 0 held unrated" in out and "rated in 1 process" in out
    assert not UnratedUsage.objects.exists()
    assert Charge.objects.get().billed_cost == Decimal("6.00")
    assert AuditEvent.objects.filter(action="billing.meter", target_id="2026-11-03/2026-11-04").count() == 2


def test_the_end_defaults_to_now(play, bob, acme):
    play(bob, acme, runs=[(timezone.now() - timedelta(hours=3), None, "")])
    day = (timezone.now() - timedelta(hours=3)).strftime("%Y-%m-%d")
    out = _meter("--start", day)
    assert "0 held unrated" in out and Charge.objects.exists()
