"""python manage.py import_spot_prices FILE — spot prices from a feed (CSV or JSON).

CSV: a header with ``sku,hourly[,time]``; JSON: a list of {"sku", "hourly", "time"}
objects (or {"prices": [...]}). ``time`` is ISO 8601 with a zone and not in the past
(omitted: now). The file is checked whole before anything is written; one audit event
records the import."""

import csv
import io
from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from billing import price_changes
from console import jsonlimits

MAX_BYTES = 10 * 1024 * 1024


class Command(BaseCommand):
    help = "Import spot prices from a CSV or JSON file (validated as a whole, audited)."

    def add_arguments(self, parser):
        parser.add_argument("file", help="a .csv or .json file, or - for JSON on stdin")
        parser.add_argument("--format", choices=["csv", "json"], help="default: from the file's extension")

    def handle(self, *args, file, format=None, **options):
        text, name = self._read(file)
        fmt = format or ("csv" if name.lower().endswith(".csv") else "json")
        rows = _csv_rows(text) if fmt == "csv" else _json_rows(text)
        try:
            made = price_changes.import_spot_prices(actor="system", rows=rows, source=f"import_spot_prices {name}")
        except ValidationError as exc:
            raise CommandError("nothing imported:\n  " + "\n  ".join(exc.message_dict.get("rows", exc.messages))) from None
        self.stdout.write(self.style.SUCCESS(f"imported {len(made)} spot price{'s' if len(made) != 1 else ''} from {name}"))

    def _read(self, file: str) -> tuple[str, str]:
        if file == "-":
            import sys

            return sys.stdin.read(MAX_BYTES + 1), "stdin"
        path, shown = Path(file), file[:200]
        try:
            if not path.is_file():
                raise CommandError(f"{shown}: no such file")
            if path.stat().st_size > MAX_BYTES:
                raise CommandError(f"{shown}: larger than {MAX_BYTES // 2**20} MiB")
            return path.read_text(encoding="utf-8"), path.name
        except UnicodeDecodeError:
            raise CommandError(f"{shown}: not UTF-8 text") from None
        except OSError as exc:  # a name too long, a directory that cannot be read
            raise CommandError(f"{shown}: {exc.strerror}") from None


def _csv_rows(text: str) -> list[dict]:
    """Rows as {column: text}; a row with more or fewer fields than the header, or a
    line that is not CSV, is a CommandError naming its line."""
    if "\x00" in text:
        raise CommandError("the CSV contains a NUL character")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [name.strip() for name in next(reader, [])]
        if not {"sku", "hourly"} <= set(header):
            raise CommandError("a CSV needs a header with the columns sku,hourly and optionally time")
        rows = []
        for fields in reader:
            if not fields:
                continue
            if len(fields) != len(header):
                raise CommandError(f"line {reader.line_num}: {len(fields)} fields, but the header has {len(header)}")
            rows.append({name: value.strip() for name, value in zip(header, fields, strict=True)})
    except csv.Error as exc:
        raise CommandError(f"line {reader.line_num}: not CSV ({exc})") from None
    return rows


def _json_rows(text: str) -> list:
    try:
        data = jsonlimits.loads(text, max_bytes=MAX_BYTES)
    except jsonlimits.JsonRefused as exc:
        raise CommandError(f"not acceptable JSON: {exc.message}") from None
    if isinstance(data, dict):
        data = data.get("prices")
    if not isinstance(data, list):
        raise CommandError('JSON must be a list of {"sku", "hourly", "time"} objects (or {"prices": [...]})')
    if (found := jsonlimits.find_unstorable(data)) is not None:
        raise CommandError(f"prices{found[0]}: {found[1]}")
    return data
