"""Jobs: work a team queues to run when GPUs are free. Low-priority jobs run in idle
capacity at the idle-capacity price and yield to paying launches; normal jobs run
on-demand. Each run of a job is an instance launched through ``instances.lifecycle``.
Rows change only through ``jobs.submission`` and ``jobs.scheduler``."""

from django.db import models
from django.utils import timezone

from console.tenancy import TeamScopedQuerySet
from console.validators import plain_name

MAX_COMMAND_CHARS = 4096


class Priority(models.TextChoices):
    NORMAL = "normal", "Normal"
    LOW = "low", "Low (idle capacity)"


# Normal jobs are started before low-priority ones; within a priority, queue order.
PRIORITY_RANK = {Priority.NORMAL: 0, Priority.LOW: 1}


class JobState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    FINISHED = "finished", "Finished"
    CANCELLED = "cancelled", "Cancelled"
    EXPIRED = "expired", "Deadline passed"


OPEN_STATES = (JobState.QUEUED, JobState.RUNNING)


class Job(models.Model):
    team = models.ForeignKey("console.Team", on_delete=models.PROTECT, related_name="jobs")
    name = models.CharField(max_length=63, validators=[plain_name])
    command = models.TextField(max_length=MAX_COMMAND_CHARS)
    # What each run boots; chosen (or the GPU model's default) when the job is queued.
    image = models.ForeignKey("instances.Image", null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    gpu_model = models.ForeignKey("instances.GpuModel", on_delete=models.PROTECT, related_name="+")
    gpu_count = models.PositiveSmallIntegerField()
    priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.LOW)
    # A job still queued at its deadline is not started any more (it expires).
    deadline = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=10, choices=JobState.choices, default=JobState.QUEUED, db_index=True)
    # Queue order within a priority: smaller first. A preempted job goes to the head.
    queue_key = models.BigIntegerField(db_index=True)
    submitted_at = models.DateTimeField(default=timezone.now)
    # When its current wait began: submission, or its last preemption.
    waiting_since = models.DateTimeField(default=timezone.now)
    preempted_at = models.DateTimeField(null=True, blank=True)
    preempt_reason = models.CharField(max_length=200, blank=True)
    # Why the scheduler could not start it on its last pass (when first in line).
    wait_note = models.CharField(max_length=300, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    # Where each run's instance is attached: {"subnet": id, "security_groups": [ids]}
    # (network.interfaces.check_choice); empty: the team's default subnet and group.
    network = models.JSONField(default=dict, blank=True)
    instance = models.ForeignKey(
        "instances.Instance", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="the instance of its current (or last) run",
    )
    created_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [models.Index(fields=["state", "gpu_model", "queue_key"], name="job_queue_order")]

    def __str__(self) -> str:
        return self.name

    @property
    def code(self) -> str:
        return f"JOB-{self.pk}"

    @property
    def pricing_model(self) -> str:
        return "idle" if self.priority == Priority.LOW else "on_demand"


class JobRun(models.Model):
    """One run of a job: the instance it ran on, from start to its end (preempted,
    finished, cancelled). Costs reach a job through its runs' instances."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="runs")
    instance = models.OneToOneField("instances.Instance", on_delete=models.PROTECT, related_name="job_run")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=200, blank=True)

    objects = TeamScopedQuerySet.as_manager(team_path="job__team")

    class Meta:
        ordering = ["started_at", "id"]

    def __str__(self) -> str:
        return f"{self.job} on {self.instance}"


class EventKind(models.TextChoices):
    SUBMIT = "submit", "Submitted"
    START = "start", "Started"
    PREEMPT = "preempt", "Preempted"
    RETRY = "retry", "Instance failed, queued again"
    RESUME = "resume", "Resumed"
    FINISH = "finish", "Finished"
    CANCEL = "cancel", "Cancelled"
    EXPIRE = "expire", "Deadline passed"


class JobEvent(models.Model):
    """Each start, preemption, resumption and end of a job, with its reason."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    time = models.DateTimeField(default=timezone.now)
    kind = models.CharField(max_length=10, choices=EventKind.choices)
    reason = models.CharField(max_length=300, blank=True)
    instance = models.ForeignKey("instances.Instance", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")

    objects = TeamScopedQuerySet.as_manager(team_path="job__team")

    class Meta:
        ordering = ["time", "id"]

    def __str__(self) -> str:
        return f"{self.job} {self.kind} at {self.time:%Y-%m-%d %H:%M:%S}"
