"""Every bad spot-price file gets one clear message and a non-zero exit, and nothing is
written: numbers that are not ASCII decimals, a ragged CSV, a CSV with a NUL, a JSON
file nested too deep or holding a NUL or a lone surrogate."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from audit.models import AuditEvent
from billing.models import SpotPrice

ROOT = Path(__file__).resolve().parents[2]


def _refused(tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    before = SpotPrice.objects.count()
    with pytest.raises(CommandError, match=match):
        call_command("import_spot_prices", str(path))
    assert SpotPrice.objects.count() == before
    assert not AuditEvent.objects.filter(action="billing.spot_price.import").exists()


@pytest.mark.parametrize("hourly", ["１２", "1_000", "1e2", "NaN"])
def test_a_price_that_is_not_an_ascii_decimal_names_its_row(prices, tmp_path, hourly):
    _refused(tmp_path, "feed.csv", f"sku,hourly\nA100-80GB,0.41\nH100-80GB,{hourly}\n", "row 2: hourly")


def test_a_json_price_that_is_not_an_ascii_decimal_names_its_row(prices, tmp_path):
    _refused(tmp_path, "feed.json", json.dumps([{"sku": "H100-80GB", "hourly": "１２"}]), "row 1: hourly")


@pytest.mark.parametrize(("text", "match"), [
    ("sku,hourly\nH100-80GB,0.95,extra\n", "line 2: 3 fields, but the header has 2"),
    ("sku,hourly,time\nH100-80GB\n", "line 2: 1 fields, but the header has 3"),
    ("sku,hourly\nH100-80GB,0.95\nA100-80GB,0.41,,\n", "line 3: 4 fields"),
    ("sku,hourly\nH100-80GB,\x000.95\n", "NUL"),
    ('sku,hourly\n"H100-80GB,0.95\n', "line"),
])
def test_a_bad_csv_is_one_message(prices, tmp_path, text, match):
    _refused(tmp_path, "feed.csv", text, match)


@pytest.mark.parametrize(("text", "match"), [
    ("[" * 5000 + "]" * 5000, "deeper than"),
    ('{"prices": ' + "[" * 100 + "]" * 100 + "}", "deeper than"),
    ('[{"sku": "H100-80GB\\u0000", "hourly": "1"}]', r"prices\[0\]\.sku: A NUL character"),
    ('[{"sku": "H100-80GB", "hourly": "1", "time\\ud800": 1}]', r"prices\[0\]\.time: A lone UTF-16 surrogate"),
    ("[1, 2", "not acceptable JSON"),
    ('"a string"', "must be a list"),
])
def test_a_bad_json_file_is_one_message(prices, tmp_path, text, match):
    _refused(tmp_path, "feed.json", text, match)


def test_the_command_exits_non_zero_without_a_traceback(tmp_path):
    path = tmp_path / "feed.csv"
    path.write_text("sku,hourly\nH100-80GB,0.95,extra\n")
    env_db = {"GPUCONSOLE_VAR_DIR": str(tmp_path), "DATABASE_URL": "", "REDIS_URL": ""}
    import os

    done = subprocess.run([sys.executable, "manage.py", "import_spot_prices", str(path)], cwd=ROOT,
                          env=os.environ | env_db, capture_output=True, text=True)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "line 2: 3 fields, but the header has 2" in done.stderr


def test_a_file_name_the_system_cannot_open_is_one_message(prices):
    with pytest.raises(CommandError, match="File name too long"):
        call_command("import_spot_prices", "x" * 300)

