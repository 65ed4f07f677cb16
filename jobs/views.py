"""The queue page (every job of your teams with its place, wait, reason and cost; a
form to submit one) and a job's page (its runs and events). Thin: scope with
``for_user``, call services, render."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone

from billing.models import currency
from console.policy import may, policy_required, require
from instances.transitions import LifecycleError
from network import interfaces as network_interfaces

from . import queue_status, scheduler, submission
from .forms import SubmitForm
from .models import Job, JobState


def _jobs(request):
    return Job.objects.for_user(request.user).select_related("team", "gpu_model", "image", "instance__host")


@policy_required("signed_in")
def queue(request):
    form = SubmitForm(request.POST or None, user=request.user)
    if request.method == "POST":
        require(request.user, "team.write", message="Your role does not allow submitting jobs.")
        if form.is_valid() and _submit(request, form):
            return redirect("job-queue")
    state = request.GET.get("state", "")
    jobs = _jobs(request)
    if state in JobState.values:
        jobs = jobs.filter(state=state)
    page = Paginator(jobs, 50).get_page(request.GET.get("page"))
    rows = list(page.object_list)
    info = queue_status.queue_info(rows, timezone.now())
    for job in rows:
        job.queue = info[job.pk]
    context = {"page": page, "rows": rows, "form": form, "states": JobState.choices, "state": state,
               "can_submit": may(request.user, "team.write"), "currency": currency(),
               "hold_minutes": int(scheduler.reclaim_hold().total_seconds() // 60)}
    return render(request, "jobs/queue.html", context, status=400 if request.method == "POST" else 200)


def _submit(request, form) -> bool:
    data = form.cleaned_data
    try:
        job = submission.submit_job(
            actor=request.user, team=data["team"], name=data["name"], command=data["command"],
            gpu_model=data["gpu_model"], gpu_count=data["gpu_count"], priority=data["priority"],
            deadline=data["deadline"], image=data["image"], subnet=data["subnet"],
            security_groups=list(data["security_groups"]) or None,
        )
    except ValidationError as exc:
        for field, errors in exc.message_dict.items():
            form.add_error(field if field in form.fields else None, errors)
        return False
    except LifecycleError as exc:
        form.add_error(None, str(exc))
        return False
    messages.success(request, f"Job {job.name} queued.")
    return True


@policy_required("signed_in")
def job_detail(request, pk):
    job = get_object_or_404(_jobs(request).prefetch_related("runs__instance__host", "events__instance"), pk=pk)
    job.queue = queue_status.queue_info([job], timezone.now())[job.pk]
    can_act = may(request.user, "team.write", job)
    network = network_interfaces.describe_choice(job.network)
    return render(request, "jobs/detail.html", {"job": job, "can_act": can_act, "currency": currency(),
                                                "network": network})


@policy_required("signed_in", methods=["POST"])
def job_cancel(request, pk):
    job = get_object_or_404(_jobs(request), pk=pk)
    require(request.user, "team.write", job, "Your role does not allow you to cancel jobs.")
    try:
        submission.cancel_job(actor=request.user, job=job)
    except LifecycleError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Job {job.name} cancelled.")
    return redirect("job-detail", pk=pk)
