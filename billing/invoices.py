"""Invoices: drafts refreshed from charges, issued once their month is over, their
memo, and the adjustments (credits) on them. An issued invoice never changes
(``InvoiceIssued``, a 409)."""

from __future__ import annotations

from datetime import date, datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from audit.models import Outcome
from audit.recording import record_event
from console.models import Team
from instances import transitions as instance_transitions

from . import invoicing, pricing
from .models import (
    Adjustment,
    Charge,
    Invoice,
    InvoiceStatus,
    LineKind,
    currency,
)


class BillingConflict(instance_transitions.LifecycleError):
    """A request the billing state does not allow (answers 409)."""

    code = "billing_conflict"


class InvoiceIssued(BillingConflict):
    code = "invoice_issued"


def refresh_invoices(*, month: date, team_ids, now: datetime) -> list[Invoice]:
    """(Re)compute the drafts of ``month`` for ``team_ids`` from charges, corrections and
    adjustments, in a few queries whatever the number of teams. Issued invoices are left
    as they are; a draft is created where there is something to bill."""
    team_ids = sorted(set(team_ids))
    existing = {i.team_id: i for i in Invoice.objects.select_for_update().filter(month=month, team_id__in=team_ids)}
    teams = [t for t in team_ids if not (t in existing and existing[t].is_issued)]
    usage = invoicing.usage_lines(month, teams)
    # A correction to an issued month lands on the team's earliest draft after that
    # month only (two drafts are open at once just after a month ends, or when an old
    # month is metered late): this draft carries the issued months after the team's
    # latest earlier draft. A draft created for an older month takes corrections over
    # from a later one, which is refreshed after it (billing.meter_runs).
    earlier = dict(Invoice.objects.filter(team_id__in=teams, status=InvoiceStatus.DRAFT, month__lt=month)
                   .values("team_id").annotate(latest=Max("month")).values_list("team_id", "latest"))
    fixes = invoicing.correction_lines(month, teams, after=earlier)
    start = pricing.month_start(month)
    new = [Invoice(team_id=t, month=month, period_start=start, period_end=pricing.next_month(start), currency=currency())
           for t in teams if t not in existing and (usage.get(t) or fixes.get(t))]
    for invoice in Invoice.objects.bulk_create(new):
        existing[invoice.team_id] = invoice
    manual = {}
    for a in Adjustment.objects.filter(invoice__in=[existing[t] for t in teams if t in existing]).order_by("id"):
        manual.setdefault(a.invoice_id, []).append(
            invoicing.Line(kind=LineKind.ADJUSTMENT, description=f"Adjustment: {a.reason}", amount=a.amount))
    drafts = [(existing[t], usage.get(t, []) + fixes.get(t, []) + manual.get(existing[t].pk, []))
              for t in teams if t in existing]
    invoicing.write(drafts, now)
    return [invoice for invoice, _ in drafts]


def refresh_invoice(*, team_id: int, month: date, now: datetime) -> Invoice | None:
    found = refresh_invoices(month=month, team_ids=[team_id], now=now)
    return found[0] if found else None


@transaction.atomic
def issue_invoice(*, actor, invoice: Invoice, now: datetime | None = None) -> Invoice:
    """Freeze a past month's draft: from here on it never changes."""
    now = _now(now)
    invoice = Invoice.objects.select_for_update().select_related("team").get(pk=invoice.pk)
    if invoice.is_issued:
        raise InvoiceIssued(f"Invoice {invoice.number} is already issued.")
    if invoice.period_end > now:
        raise BillingConflict(f"The month of {invoice.month:%B %Y} is not over; its invoice stays a draft until it is.")
    refresh_invoice(team_id=invoice.team_id, month=invoice.month, now=now)
    invoice.refresh_from_db()
    return _freeze(invoice, actor, now)


def _freeze(invoice: Invoice, actor, now: datetime) -> Invoice:
    invoice.status = InvoiceStatus.ISSUED
    invoice.number = f"{invoice.team.slug.upper()}-{invoice.month:%Y%m}"
    invoice.issued_at = now
    invoice.save(update_fields=["status", "number", "issued_at"])
    record_event(
        actor=actor, action="billing.invoice.issue", target=invoice, team=invoice.team_id,
        details={"number": invoice.number, "month": f"{invoice.month:%Y-%m}", "total": str(invoice.total)},
    )
    return invoice


def unissued(before: date) -> set[tuple[int, date]]:
    """(team id, month) of every month before ``before`` that has charges or a draft
    and no issued invoice yet: what ``issue_months`` issues."""
    # .order_by(): the default ordering would make DISTINCT run over every charge.
    pending = set(Charge.objects.filter(month__lt=before).order_by().values_list("team_id", "month").distinct()) | set(
        Invoice.objects.filter(month__lt=before, status=InvoiceStatus.DRAFT).values_list("team_id", "month"))
    return pending - set(Invoice.objects.filter(status=InvoiceStatus.ISSUED).values_list("team_id", "month"))


def issue_months(*, actor, before: date, now: datetime) -> list[Invoice]:
    """Issue the invoice of every team and month before ``before`` that has charges or a
    draft and is not issued yet, oldest month first, each month in one transaction."""
    pending = unissued(before)
    out = []
    for month in sorted({m for _, m in pending}):
        with transaction.atomic():
            drafts = refresh_invoices(month=month, team_ids={t for t, m in pending if m == month}, now=now)
            teams = {t.pk: t for t in Team.objects.filter(pk__in=[d.team_id for d in drafts])}
            for draft in drafts:
                draft.team = teams[draft.team_id]
                out.append(_freeze(draft, actor, now))
    # Corrections found while issuing land in the current drafts.
    if out:
        with transaction.atomic():
            drafts = refresh_invoices(month=before, team_ids={i.team_id for i in out}, now=now)
            record_event(actor=actor, action="billing.invoice.refresh", target_type="billing.invoice",
                         details={"month": f"{before:%Y-%m}", "totals": {str(d.pk): str(d.total) for d in drafts}})
    return out


def refuse_invoice_change(*, actor, invoice: Invoice, attempted: str) -> None:
    """Record the refused attempt (in its own transaction, so it survives) and raise."""
    with transaction.atomic():
        record_event(
            actor=actor, action="billing.invoice.edit", target=invoice, team=invoice.team_id, outcome=Outcome.DENIED,
            details={"number": invoice.number, "attempted": attempted[:200]},
        )
    raise InvoiceIssued(
        f"Invoice {invoice.number} is issued and cannot be changed; a correction goes into a later invoice as an adjustment."
    )


def update_invoice(*, actor, invoice: Invoice, memo: str) -> Invoice:
    """Change a draft's memo (a purchase-order reference, say); an issued invoice refuses."""
    try:
        return _update_draft_memo(actor=actor, invoice=invoice, memo=memo)
    except InvoiceIssued:
        refuse_invoice_change(actor=actor, invoice=invoice, attempted=f"memo={memo!r}")
        raise AssertionError("unreachable") from None


@transaction.atomic
def _update_draft_memo(*, actor, invoice: Invoice, memo: str) -> Invoice:
    locked = _draft(invoice)  # an issued invoice refuses first (audited), whatever the memo
    longest = Invoice._meta.get_field("memo").max_length
    if len(memo) > longest:
        raise ValidationError({"memo": f"A memo is at most {longest} characters; this one has {len(memo)}."})
    before = locked.memo
    locked.memo = memo
    locked.save(update_fields=["memo"])
    record_event(actor=actor, action="billing.invoice.update", target=locked, team=locked.team_id,
                 details={"memo": {"from": before, "to": memo}})
    return locked


def _draft(invoice: Invoice) -> Invoice:
    locked = Invoice.objects.select_for_update().get(pk=invoice.pk)
    if locked.is_issued:
        raise InvoiceIssued(f"Invoice {locked.number} is issued.")
    return locked


def add_adjustment(*, actor, team: Team, amount, reason: str, invoice: Invoice | None = None,
                   now: datetime | None = None) -> Adjustment:
    """A credit (negative) or charge on a draft: the given one or the team's current
    month's. An issued invoice refuses, and the attempt is audited."""
    try:
        return _add_adjustment(actor=actor, team=team, amount=amount, reason=reason, invoice=invoice, now=_now(now))
    except InvoiceIssued:
        refuse_invoice_change(actor=actor, invoice=invoice, attempted=f"adjustment {amount}: {reason}")
        raise AssertionError("unreachable") from None


@transaction.atomic
def _add_adjustment(*, actor, team: Team, amount, reason: str, invoice: Invoice | None, now: datetime) -> Adjustment:
    try:
        amount = pricing.money(amount)
    except (TypeError, ArithmeticError):
        raise ValidationError({"amount": "An adjustment is an amount like -25.00."}) from None
    if not amount.is_finite() or amount == 0 or amount != amount.quantize(pricing.CENT):
        raise ValidationError({"amount": "An adjustment is a non-zero amount in whole cents."})
    if not reason.strip():
        raise ValidationError({"reason": "Say why."})
    if invoice is not None:
        invoice = _draft(invoice)
    else:
        month = pricing.month_start(now).date()
        invoice = Invoice.objects.filter(team=team, month=month).first() or Invoice.objects.create(
            team=team, month=month, period_start=pricing.month_start(now),
            period_end=pricing.next_month(now), currency=currency(),
        )
    adjustment = Adjustment.objects.create(team=team, invoice=invoice, amount=amount, reason=reason[:200],
                                           created_by=_user(actor), created_at=now)
    refresh_invoice(team_id=team.pk, month=invoice.month, now=now)
    record_event(actor=actor, action="billing.adjustment.create", target=adjustment, team=team,
                 details={"amount": str(amount), "reason": reason, "invoice": invoice.pk})
    return adjustment


def _now(now: datetime | None) -> datetime:
    return now or timezone.now()


def _user(actor):
    return actor if getattr(actor, "is_authenticated", False) else None
