"""python manage.py verify_audit [--from SEQ|DATE] [--to SEQ|DATE]

Walks the hash chain and the signed checkpoints; prints each segment as valid or INVALID
(with the first broken sequence number and why), then a summary. Exit code 0 only when
everything verifies."""

from django.core.management.base import BaseCommand, CommandError

from audit import verification
from audit.verification import parse_bound


class Command(BaseCommand):
    help = "Verify the audit log's hash chain and signed checkpoints."

    def add_arguments(self, parser):
        parser.add_argument(
            "--from",
            dest="start",
            metavar="SEQ|DATE",
            help="first sequence number or ISO date/time",
        )
        parser.add_argument(
            "--to", dest="end", metavar="SEQ|DATE", help="last sequence number or ISO date/time"
        )

    def handle(self, *args, start=None, end=None, **options):
        try:
            lo = parse_bound(start, "--from") if start else None
            hi = parse_bound(end, "--to") if end else None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
            raise CommandError(f"--from {lo} is after --to {hi}")
        run = verification.run_verification(actor="verify_audit", start=lo, end=hi)
        for line in run.report.lines():
            self.stdout.write(line, self.style.ERROR if "INVALID" in line else self.style.SUCCESS)
        if not run.valid:
            raise CommandError(
                f"the audit log does not verify (first broken #{run.first_broken_seq})",
                returncode=1,
            )
