"""python manage.py reconcile_costs [--month YYYY-MM] — does every page, API and export
read the same money? For every team and month (or the one given): the cost explorer,
the summary, the overview, the invoice, the CSV and the FOCUS export. Then: no usage is
billed after an instance ended, and every job costs what its instances were charged.
Exits non-zero on any cent of difference, naming each."""

from datetime import date

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from billing import reconcile
from console.models import Team
from console.validators import parse_month


class Command(BaseCommand):
    help = "Compare every cost figure of every team and month; exit 1 on any difference."

    def add_arguments(self, parser):
        parser.add_argument("--month", help="YYYY-MM (default: every month with charges or an invoice)")

    def handle(self, *args, month=None, **options):
        wanted = _month(month) if month else None
        now = timezone.now()
        checked, failed = 0, []
        for team in Team.objects.order_by("name"):
            for m in [wanted] if wanted else reconcile.months_of(team):
                result = reconcile.check_month(team, m, now=now)
                checked += 1
                before = next(iter(result.before.values()))
                after = next(iter(result.after.values()))
                status = "ok" if not result.differences else "DIFFERENT"
                self.stdout.write(f"{team.name:20} {m:%Y-%m}  before credits {before:>12}  after credits {after:>12}  "
                                  f"{status}")
                for line in result.differences:
                    self.stdout.write(f"    {line}")
                if result.differences:
                    failed.append(f"{team.name} {m:%Y-%m}")
        late, jobs = reconcile.usage_after_end(), reconcile.job_costs_differ()
        energy = reconcile.energy_differs()
        for line in late + jobs + energy:
            self.stdout.write(f"    {line}")
        problems = [f"{len(failed)} of {checked} team-months differ: {', '.join(failed)}"] if failed else []
        if late:
            problems.append(f"{len(late)} bills after an instance's end")
        if jobs:
            problems.append(f"{len(jobs)} jobs whose cost is not their instances' charges")
        if energy:
            problems.append(f"{len(energy)} team-months whose exported energy is not the counters'")
        if problems:
            raise CommandError("; ".join(problems))
        self.stdout.write(self.style.SUCCESS(f"{checked} team-months reconcile to the cent; nothing is billed after "
                                             "an instance's end; every job costs its instances' charges."))


def _month(text: str) -> date:
    try:
        return parse_month(text)
    except ValidationError as exc:
        raise CommandError(f"--month {text[:40]!r}: {exc.messages[0]}") from None
