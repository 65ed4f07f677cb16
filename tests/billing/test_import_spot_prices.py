import io
import json
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from audit.models import AuditEvent
from billing.models import SpotPrice, SpotSource


def _run(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    out = io.StringIO()
    call_command("import_spot_prices", str(path), stdout=out)
    return out.getvalue()


def test_it_imports_a_csv_and_audits_it(prices, tmp_path):
    later = (timezone.now().replace(microsecond=0) + timezone.timedelta(hours=1)).isoformat()
    out = _run(tmp_path, "feed.csv", f"sku,hourly,time\nH100-80GB,0.95,{later}\nA100-80GB,0.41,\n")
    assert "imported 2 spot prices" in out
    latest = SpotPrice.objects.filter(sku="H100-80GB").latest("time")
    assert (latest.hourly, latest.source) == (Decimal("0.95"), SpotSource.IMPORT)
    event = AuditEvent.objects.get(action="billing.spot_price.import")
    assert event.details["count"] == 2 and "feed.csv" in event.details["source"]


def test_it_imports_json(prices, tmp_path):
    _run(tmp_path, "feed.json", json.dumps([{"sku": "H200-141GB", "hourly": "1.5"}]))
    assert SpotPrice.objects.filter(sku="H200-141GB", source=SpotSource.IMPORT).get().hourly == Decimal("1.5")


@pytest.mark.parametrize("row, why", [
    ("B200-192GB,1.00,", "Unknown SKU"),
    ("H100-80GB,-1,", "not a positive price"),
    ("H100-80GB,0.1234567,", "not a positive price"),
    ("H100-80GB,abc,", "not a positive price"),
    ("H100-80GB,1.00,2020-01-01T00:00:00Z", "in the past"),
    ("H100-80GB,1.00,yesterday", "not a date"),
])
def test_one_bad_row_imports_nothing_and_names_the_row(prices, tmp_path, row, why):
    before = SpotPrice.objects.count()
    with pytest.raises(CommandError, match=why) as caught:
        _run(tmp_path, "feed.csv", f"sku,hourly,time\nA100-80GB,0.41,\n{row}\n")
    assert "row 2" in str(caught.value)
    assert SpotPrice.objects.count() == before
    assert not AuditEvent.objects.filter(action="billing.spot_price.import").exists()


def test_a_file_without_the_columns_is_refused(prices, tmp_path):
    with pytest.raises(CommandError, match="sku,hourly"):
        _run(tmp_path, "feed.csv", "name,price\nH100-80GB,1\n")


def test_json_that_is_not_a_list_is_refused(prices, tmp_path):
    with pytest.raises(CommandError, match="list"):
        _run(tmp_path, "feed.json", '{"sku": "H100-80GB"}')
