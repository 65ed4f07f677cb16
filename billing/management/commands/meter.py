"""python manage.py meter --start YYYY-MM-DD [--end YYYY-MM-DD] — meter UTC days again:
after an operator prices a SKU whose usage was held unrated, or to rebuild an old
window. The window is widened to whole UTC days (end excluded; default: now) and
replaced in one transaction, audited as ``billing.meter``; the drafts it feeds are
refreshed. Issued invoices do not change: a difference lands on the team's next
draft as a correction."""

import time
from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from billing import meter_runs
from console.validators import moment_in_range


class Command(BaseCommand):
    help = "Meter the UTC days from --start up to --end (default now) again; prints what was written."

    def add_arguments(self, parser):
        parser.add_argument("--start", required=True, help="first UTC day, YYYY-MM-DD")
        parser.add_argument("--end", help="UTC day after the last one, YYYY-MM-DD (default: now)")

    def handle(self, *args, start, end=None, **options):
        now = timezone.now()
        first = _day("--start", start)
        stop = _day("--end", end) if end else now
        if first >= now:
            raise CommandError(f"--start {start} is not in the past: there is nothing to meter yet.")
        if stop <= first:
            raise CommandError(f"--end must be after --start ({start}).")
        t0 = time.perf_counter()
        try:
            result = meter_runs.meter_window(actor="system", start=first, end=stop, now=now)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
        workers = f"{result.workers} processes" if result.workers > 1 else "1 process"
        self.stdout.write(
            f"metered {result.start:%Y-%m-%d} to {result.end:%Y-%m-%d} (UTC days, end excluded) in "
            f"{time.perf_counter() - t0:.1f} s, rated in {workers}: {result.usage_records} usage records, "
            f"{result.charges} charges, {result.unrated} held unrated")
        if result.unrated:
            self.stdout.write(self.style.WARNING(
                "some usage has no price in effect and is held unrated: price its SKU, then meter again"))


def _day(flag: str, text: str) -> datetime:
    try:
        day = datetime.strptime(text, "%Y-%m-%d").date()
    except ValueError:
        raise CommandError(f"{flag} {text[:40]!r} is not a day like 2026-11-01.") from None
    moment = datetime(day.year, day.month, day.day, tzinfo=UTC)
    try:
        moment_in_range(moment)
    except ValidationError as exc:
        raise CommandError(f"{flag} {text}: {exc.messages[0]}") from None
    return moment
