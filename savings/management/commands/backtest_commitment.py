"""Replay the last N days of a team's usage through the real metering, as billed and
with the advised 1-year reservation, and print both totals. Changes nothing."""

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from billing import pricing
from console.models import Team
from savings import commitments


class Command(BaseCommand):
    help = "Backtest the commitment advice: the last N days metered with and without it."

    def add_arguments(self, parser):
        parser.add_argument("--team", required=True, help="team name or slug")
        parser.add_argument("--days", type=int, default=30, help="whole UTC days to replay (1-90)")

    def handle(self, *args, team, days, **options):
        if not 1 <= days <= 90:
            raise CommandError("--days is from 1 to 90.")
        found = Team.objects.filter(slug=team).first() or Team.objects.filter(name=team).first()
        if found is None:
            raise CommandError(f"No team {team!r}.")
        now = timezone.now()
        # The advice is made from the same whole UTC days the backtest replays.
        advice = commitments.advise(found, now=pricing.floor_day(now), days=days)
        if not advice:
            self.stdout.write(f"{found.name}: no 1-year reservation would have cost less over the last {days} days.")
            return
        for a in advice:
            result = commitments.backtest(found, a, now=now, days=days)
            self.stdout.write(
                f"{found.name} {a.gpu_model}: reserve {a.gpus} GPU(s) for 1 year at {a.reserved_hourly}/h each "
                f"(coverage {a.coverage_pct:.1f}%, utilisation {a.utilisation_pct:.1f}%, "
                f"break-even {a.break_even_pct:.0f}%)")
            self.stdout.write(f"  metered {result.start:%Y-%m-%d} to {result.end:%Y-%m-%d} (UTC, end excluded)")
            self.stdout.write(f"  without the reservation {result.without:>14}")
            self.stdout.write(f"  with the reservation    {result.with_reservation:>14}")
            self.stdout.write(f"  difference              {result.without - result.with_reservation:>14}")
