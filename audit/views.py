"""The auditor's pages: search the log, read one event with its chain fields, verify."""

from datetime import timedelta

from django.contrib import messages
from django.http import QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone

from console.policy import policy_required
from console.validators import whole_number

from . import access, verification
from .export import FORMATS
from .filters import AuditEventFilter
from .models import Outcome, Verification
from .verification import chain_status

PAGE_SIZE = 50
QUICK_RANGES = [
    ("Last hour", timedelta(hours=1)),
    ("Last 24 hours", timedelta(days=1)),
    ("Last 7 days", timedelta(days=7)),
]


def _before(request) -> int | None:
    raw = request.GET.get("before", "")
    return whole_number(raw)


@policy_required("audit.read")
def events(request):
    filterset = AuditEventFilter(
        request.GET, queryset=access.visible_events(request.user).select_related("team")
    )
    valid = filterset.is_valid()
    rows, older = [], None
    if valid:
        access.check_team(request.user, filterset.form.cleaned_data.get("team"))
        qs = filterset.qs.order_by("-seq")
        if (before := _before(request)) is not None:
            qs = qs.filter(seq__lt=before)
        rows = list(qs[: PAGE_SIZE + 1])
        if len(rows) > PAGE_SIZE:
            rows, older = rows[:PAGE_SIZE], rows[PAGE_SIZE - 1].seq
    query = request.GET.copy()
    query.pop("before", None)
    now = timezone.now()
    last_run = Verification.objects.first()
    context = {
        "filter": filterset,
        "form": filterset.form,
        "rows": rows,
        "older": older,
        "query": query.urlencode(),
        "teams": access.audit_teams(request.user),
        "outcomes": Outcome.choices,
        "quick": [
            (label, (now - delta).strftime("%Y-%m-%dT%H:%M")) for label, delta in QUICK_RANGES
        ],
        "formats": list(FORMATS),
        "verification": last_run,
        "full_report": access.reads_whole_log(request.user),
        "broken_is_yours": last_run is not None and access.broken_is_theirs(request.user, last_run),
    }
    return render(request, "audit/events.html", context, status=200 if valid else 400)


@policy_required("audit.read")
def event_detail(request, seq: int):
    event = get_object_or_404(access.visible_events(request.user).select_related("team"), seq=seq)
    return render(request, "audit/detail.html", {"event": event, "chain": chain_status(event)})


@policy_required("audit.read", methods=["POST"])
def verify(request):
    run = verification.run_verification(actor=request.user)
    if run.valid:
        counted = f": {run.checked} events, every segment valid" if access.reads_whole_log(request.user) else ""
        messages.success(request, f"The audit log verifies{counted}.")
    elif access.broken_is_theirs(request.user, run):
        messages.error(
            request,
            f"The audit log does NOT verify: first broken record #{run.first_broken_seq} ({run.reason}).",
        )
    else:
        messages.error(
            request, "The audit log does NOT verify: a record of another team is broken."
        )
    # Back to the same filters; re-encoded, so the value can only ever be a query string.
    query = QueryDict(request.POST.get("query", "")[:2000]).urlencode()
    return redirect(reverse("audit-events") + (f"?{query}" if query else ""))
