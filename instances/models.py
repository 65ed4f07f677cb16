from collections.abc import Iterable

from django.db import models
from django.utils import timezone

from console.tenancy import READ_ROLES, TeamScopedQuerySet
from console.validators import plain_name


class Region(models.Model):
    name = models.CharField(max_length=40, unique=True, validators=[plain_name])
    display_name = models.CharField(max_length=80, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


# NVML's GPM metrics (tensor-core activity, SM occupancy, DRAM bandwidth) exist from Hopper on.
GPM_ARCHITECTURES = frozenset({"hopper", "blackwell"})


def reports_gpm(architecture: str) -> bool:
    """Whether GPUs of this architecture report GPM metrics; where it is not recorded,
    assumed they do (what comes is shown, what does not is 'not yet')."""
    return not architecture or architecture.lower() in GPM_ARCHITECTURES


class GpuModel(models.Model):
    """A GPU product, e.g. H100-80GB. Prices and placement key on it."""

    name = models.CharField(max_length=40, unique=True, validators=[plain_name])
    memory_gb = models.PositiveIntegerField()
    power_limit_w = models.PositiveIntegerField(default=700)
    architecture = models.CharField(max_length=20, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def reports_gpm(self) -> bool:
        return reports_gpm(self.architecture)


class SliceKind(models.TextChoices):
    MIG = "mig", "MIG slice"
    VGPU = "vgpu", "vGPU slice"


class SliceProfile(models.Model):
    """A MIG or vGPU profile of a GPU model, e.g. H100-80GB MIG 1g.10gb."""

    gpu_model = models.ForeignKey(GpuModel, on_delete=models.CASCADE, related_name="slice_profiles")
    kind = models.CharField(max_length=8, choices=SliceKind.choices)
    name = models.CharField(max_length=40, validators=[plain_name])
    memory_gb = models.PositiveIntegerField()
    # Share of the whole GPU, in sevenths for MIG (1g = 1/7) or in slices per GPU for vGPU.
    slices_per_gpu = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["gpu_model__name", "kind", "name"]
        constraints = [models.UniqueConstraint(fields=["gpu_model", "kind", "name"], name="unique_profile")]

    def __str__(self) -> str:
        return f"{self.gpu_model.name} {self.kind} {self.name}"

    @property
    def sku(self) -> str:
        return f"{self.gpu_model.name}:{self.kind}:{self.name}"

    @property
    def reports_activity(self) -> bool:
        """A MIG slice's only activity is GPM's (NVML has no utilization on MIG devices):
        a slice of a GPU without GPM reports none; a vGPU reports its utilization."""
        return self.kind != SliceKind.MIG or self.gpu_model.reports_gpm


class HostKind(models.TextChoices):
    PASSTHROUGH = "passthrough", "Bare metal / passthrough"
    VGPU = "vgpu", "vGPU-capable"
    MIG = "mig", "MIG-capable"


class HostState(models.TextChoices):
    ACTIVE = "active", "Active"
    DRAINING = "draining", "Draining"
    DOWN = "down", "Down"


class Host(models.Model):
    name = models.CharField(max_length=63, unique=True, validators=[plain_name])
    region = models.ForeignKey(Region, on_delete=models.PROTECT, related_name="hosts")
    kind = models.CharField(max_length=16, choices=HostKind.choices, default=HostKind.PASSTHROUGH)
    state = models.CharField(max_length=16, choices=HostState.choices, default=HostState.ACTIVE)
    # One NVLink domain for every GPU of the host (an HGX board); GPUs may name their own.
    nvlink_group = models.CharField(max_length=40, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Cordoned: takes no new placements (instances/cordon.py); what runs there keeps running.
    cordoned_at = models.DateTimeField(null=True, blank=True)
    cordon_reason = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["region__name", "name"]

    def __str__(self) -> str:
        return self.name


def nvlink_groups(host_group: str, gpus: Iterable[tuple[int, str]]) -> dict[str, list[int]]:
    """{NVLink group: its GPU indexes} of one host from its group and its GPUs' (index,
    group): as placement pools them (``services.nvlink_group``): a GPU's own group, else
    the host's; on a host whose GPUs name groups a GPU in none is a group of one; {} when
    the host has no NVLink group at all."""
    gpus = sorted(gpus)
    grouped = any(group for _, group in gpus)
    if not grouped and not host_group:
        return {}
    out: dict[str, list[int]] = {}
    for index, group in gpus:
        out.setdefault(group or host_group or f"gpu{index}", []).append(index)
    return out


def nvlink_text(groups: dict[str, list[int]]) -> str:
    """The NVLink groups of a host in a few words: "h-nvl (8 GPUs)", "4 groups of 2 GPUs",
    "3 groups (2, 2, 1 GPUs)"; "" when it has none."""
    if not groups:
        return ""
    sizes = sorted((len(v) for v in groups.values()), reverse=True)
    if len(groups) == 1:
        return f"{next(iter(groups))} ({sizes[0]} GPU{'s' if sizes[0] != 1 else ''})"
    if len(set(sizes)) == 1:
        return f"{len(groups)} groups of {sizes[0]} GPU{'s' if sizes[0] != 1 else ''}"
    return f"{len(groups)} groups ({', '.join(map(str, sizes))} GPUs)"


class GpuQuerySet(TeamScopedQuerySet):
    pass


class Gpu(models.Model):
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=80, unique=True)
    model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="gpus")
    memory_total = models.BigIntegerField(help_text="bytes")
    pci_bus_id = models.CharField(max_length=32, blank=True)
    # The NVLink group of this GPU where a host has several (PCIe cards bridged in pairs);
    # blank: the host's group, if any.
    nvlink_group = models.CharField(max_length=40, blank=True)
    # The instance that holds the whole GPU now (slices are held through GpuSlice).
    instance = models.ForeignKey(
        "Instance", null=True, blank=True, on_delete=models.SET_NULL, related_name="gpus"
    )
    team = models.ForeignKey("console.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    cordoned_at = models.DateTimeField(null=True, blank=True)
    cordon_reason = models.CharField(max_length=300, blank=True)

    objects = GpuQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["host__name", "index"]
        constraints = [models.UniqueConstraint(fields=["host", "index"], name="one_gpu_per_index")]

    def __str__(self) -> str:
        return f"{self.host.name}/gpu{self.index} ({self.model.name})"


class GpuSlice(models.Model):
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="slices")
    profile = models.ForeignKey(SliceProfile, on_delete=models.PROTECT, related_name="slices")
    uuid = models.CharField(max_length=80, unique=True)
    gpu_instance_id = models.PositiveSmallIntegerField(default=0, help_text="MIG GPU instance id")
    instance = models.ForeignKey(
        "Instance", null=True, blank=True, on_delete=models.SET_NULL, related_name="slices"
    )
    team = models.ForeignKey("console.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["gpu__host__name", "gpu__index", "gpu_instance_id"]

    def __str__(self) -> str:
        return f"{self.gpu} {self.profile.name} #{self.gpu_instance_id}"


class GpuHold(models.Model):
    """One instance's hold on a whole GPU (``slice`` empty) or on one slice, over
    [start, end); ``end`` is empty while it holds. Telemetry read inside the interval
    belongs to the instance and its team, whoever holds the device afterwards."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="holds")
    slice = models.ForeignKey(GpuSlice, null=True, blank=True, on_delete=models.CASCADE, related_name="holds")
    instance = models.ForeignKey("Instance", on_delete=models.CASCADE, related_name="holds")
    team = models.ForeignKey("console.Team", on_delete=models.PROTECT, related_name="+")
    start = models.DateTimeField()
    end = models.DateTimeField(null=True, blank=True)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["start", "id"]
        indexes = [models.Index(fields=["gpu", "start"], name="gpuhold_gpu_start")]

    def __str__(self) -> str:
        return f"{self.instance_id} holds {self.slice_id or self.gpu_id} from {self.start:%Y-%m-%d %H:%M:%S}"


class PricingModel(models.TextChoices):
    ON_DEMAND = "on_demand", "On-demand"
    RESERVED = "reserved", "Reserved"
    SPOT = "spot", "Spot"
    # Low-priority jobs in idle capacity: launched only by the job queue (jobs/).
    IDLE = "idle", "Idle capacity"


# The platform may take these back with a notice when paying work needs the GPUs.
PREEMPTIBLE = (PricingModel.SPOT, PricingModel.IDLE)
# What a user may pick when launching an instance directly.
LAUNCHABLE = [(value, label) for value, label in PricingModel.choices if value != PricingModel.IDLE]


class State(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    STOPPING = "stopping", "Stopping"
    STOPPED = "stopped", "Stopped"
    TERMINATED = "terminated", "Terminated"
    PREEMPTED = "preempted", "Preempted"
    FAILED = "failed", "Failed"


# state -> states it may move to. Nothing leaves a final state, and nothing goes back:
# a stopped instance starts again as itself, but a preempted or ended one never runs
# again (a requeued job gets a new instance). docs/instances.md draws it.
TRANSITIONS: dict[str, tuple[str, ...]] = {
    State.PENDING: (State.RUNNING, State.STOPPED, State.TERMINATED, State.FAILED),
    State.RUNNING: (State.STOPPING, State.TERMINATED, State.PREEMPTED),
    State.STOPPING: (State.STOPPED, State.TERMINATED),
    State.STOPPED: (State.PENDING, State.TERMINATED),
    State.PREEMPTED: (State.TERMINATED,),
    State.TERMINATED: (),
    State.FAILED: (),
}
FINAL_STATES = (State.TERMINATED, State.FAILED)
# States in which the instance holds its GPUs (running and stopping ones are billed).
HOLDING_STATES = (State.PENDING, State.RUNNING, State.STOPPING)


# The console's counts, one definition each, used by every page:
# - "running" instances are those in state RUNNING (pending and stopping ones hold GPUs
#   but are not running);
# - a GPU is "used" when an instance holds it whole or holds any of its MIG/vGPU slices;
# - a GPU is "free" when a whole-GPU launch could take it now: not held, on an active
#   passthrough host, neither it nor its host cordoned. GPUs of MIG and vGPU hosts are
#   offered as slices, never whole, and draining or down hosts take nothing new, so an
#   unused GPU is not always free.
def gpu_used_q(prefix: str = "") -> models.Q:
    """Q for a used GPU; ``prefix`` reaches the GPU from another model (e.g. "gpus__")."""
    return models.Q(**{f"{prefix}instance__isnull": False}) | models.Q(**{f"{prefix}slices__instance__isnull": False})


def gpu_free_q(prefix: str = "") -> models.Q:
    """Q for a free GPU (see above): the one definition the launch form, placement and
    the fleet's capacity count with."""
    return models.Q(**{f"{prefix}instance__isnull": True, f"{prefix}host__state": HostState.ACTIVE,
                       f"{prefix}host__kind": HostKind.PASSTHROUGH, f"{prefix}cordoned_at__isnull": True,
                       f"{prefix}host__cordoned_at__isnull": True})


class Precision(models.TextChoices):
    """The number format an instance's tensor work mostly uses; it picks the peak its
    achieved-TFLOP/s estimate is measured against (monitoring/flops.py)."""

    BF16 = "bf16", "bf16"
    FP16 = "fp16", "fp16"
    TF32 = "tf32", "tf32"
    FP8 = "fp8", "fp8"


class PrecisionSource(models.TextChoices):
    """Who said which precision was in force: only a workload's own declaration is
    more than an assumption."""

    DEFAULT = "default", "the default, never set"
    TEAM = "team", "set by the team"
    WORKLOAD = "workload", "declared by the workload"


class PrecisionPeriod(models.Model):
    """The precision an instance's TFLOP/s estimate used over [start, end); ``end`` is
    empty while in force. A change closes one period and opens the next, so the
    estimate of any past window is read at the precision of its time. An instance
    without periods has had its launch precision throughout."""

    instance = models.ForeignKey("Instance", on_delete=models.CASCADE, related_name="precision_periods")
    team = models.ForeignKey("console.Team", on_delete=models.PROTECT, related_name="+")
    precision = models.CharField(max_length=8, choices=Precision.choices)
    source = models.CharField(max_length=16, choices=PrecisionSource.choices)
    start = models.DateTimeField()
    end = models.DateTimeField(null=True, blank=True)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["start", "id"]
        indexes = [models.Index(fields=["instance", "start"], name="precision_instance_start")]

    def __str__(self) -> str:
        return f"{self.instance_id} {self.precision} ({self.source}) from {self.start:%Y-%m-%d %H:%M:%S}"


class ImageVisibility(models.TextChoices):
    PUBLIC = "public", "Public"
    PRIVATE = "private", "Private to a team"


class ImageQuerySet(TeamScopedQuerySet):
    def for_user(self, user, roles=READ_ROLES, *, operators: bool = True):
        """Public images for every signed-in user; a team's private images for its members."""
        if not (user and user.is_authenticated and user.is_active):
            return self.none()
        return self.filter(models.Q(visibility=ImageVisibility.PUBLIC) | models.Q(pk__in=super().for_user(
            user, roles, operators=operators).values("pk")))

    def launchable(self):
        return self.filter(retired_at__isnull=True)


class Image(models.Model):
    """A container image an instance boots: public ones kept by operators, private ones a
    team brings by registry reference. Retiring one stops new launches, not running ones."""

    name = models.CharField(max_length=63, validators=[plain_name])
    framework = models.CharField(max_length=40, blank=True)
    framework_version = models.CharField(max_length=20, blank=True)
    cuda_version = models.CharField(max_length=12, blank=True)
    gpu_models = models.ManyToManyField(GpuModel, related_name="images")
    size_bytes = models.BigIntegerField(null=True, blank=True)
    reference = models.CharField(max_length=512, help_text="OCI reference: registry/repository[:tag][@digest]")
    visibility = models.CharField(max_length=8, choices=ImageVisibility.choices, default=ImageVisibility.PUBLIC)
    team = models.ForeignKey("console.Team", null=True, blank=True, on_delete=models.PROTECT, related_name="images")
    # The image a launch of these GPU models boots when it names none.
    default_for = models.ManyToManyField(GpuModel, blank=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    retired_at = models.DateTimeField(null=True, blank=True)

    objects = ImageQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(visibility="public", team__isnull=True)
                           | models.Q(visibility="private", team__isnull=False)),
                name="image_private_to_one_team",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def retired(self) -> bool:
        return self.retired_at is not None

    @property
    def size_gb(self) -> str:
        """The size in gigabytes (10⁹ bytes, as registries report it), one decimal."""
        return "" if self.size_bytes is None else f"{self.size_bytes / 10**9:.1f} GB"


class Instance(models.Model):
    team = models.ForeignKey("console.Team", on_delete=models.PROTECT, related_name="instances")
    name = models.CharField(max_length=63, validators=[plain_name])
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="instances")
    slice_profile = models.ForeignKey(
        SliceProfile, null=True, blank=True, on_delete=models.PROTECT, related_name="instances"
    )
    gpu_count = models.PositiveSmallIntegerField()
    pricing_model = models.CharField(max_length=16, choices=PricingModel.choices)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING, db_index=True)
    host = models.ForeignKey(Host, null=True, blank=True, on_delete=models.SET_NULL, related_name="instances")
    created_by = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    state_changed_at = models.DateTimeField(default=timezone.now)
    # {key: value} strings the team attaches (cost centre, project); exported as FOCUS Tags.
    labels = models.JSONField(default=dict, blank=True)
    # The number format its tensor work mostly uses: picks the peak of the TFLOP/s estimate.
    precision = models.CharField(max_length=8, choices=Precision.choices, default=Precision.BF16)
    # The image it boots (empty: launched before the catalog, or with none on offer).
    image = models.ForeignKey(Image, null=True, blank=True, on_delete=models.PROTECT, related_name="instances")
    # Spot only: the most it pays per GPU-hour; a spot price above it preempts it.
    max_price = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["team", "state"])]

    def __str__(self) -> str:
        return self.name

    @property
    def sku(self) -> str:
        return self.slice_profile.sku if self.slice_profile_id else self.gpu_model.name

    def can_move_to(self, state: str) -> bool:
        return state in TRANSITIONS[self.state]


class LifecycleEvent(models.Model):
    """Every state change of an instance, timestamped. Billing meters from these."""

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="events")
    time = models.DateTimeField(default=timezone.now, db_index=True)
    from_state = models.CharField(max_length=16, choices=State.choices, blank=True)
    to_state = models.CharField(max_length=16, choices=State.choices)
    gpu_count = models.PositiveSmallIntegerField()
    host = models.ForeignKey(Host, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    reason = models.CharField(max_length=200, blank=True)
    # True when the platform, not the user, caused it (spot preemption, host failure).
    by_platform = models.BooleanField(default=False)

    objects = TeamScopedQuerySet.as_manager(team_path="instance__team")

    class Meta:
        ordering = ["time", "id"]

    def __str__(self) -> str:
        return f"{self.instance} {self.from_state or '-'} -> {self.to_state} at {self.time:%Y-%m-%d %H:%M:%S}"


class NoticeStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DONE = "done", "Preempted"
    MOOT = "moot", "Ended before preemption"
    FAILED = "failed", "Could not preempt"


class PreemptionNotice(models.Model):
    """A spot instance the platform will preempt at ``preempt_at``. (The table kept its
    name from when billing held preemption.)"""

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="preemption_notices")
    team = models.ForeignKey("console.Team", on_delete=models.CASCADE, related_name="+")
    notice_at = models.DateTimeField()
    preempt_at = models.DateTimeField()
    reason = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=8, choices=NoticeStatus.choices, default=NoticeStatus.PENDING)
    done_at = models.DateTimeField(null=True, blank=True)
    issued_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    objects = TeamScopedQuerySet.as_manager(team_path="team")

    class Meta:
        db_table = "billing_preemptionnotice"
        ordering = ["-notice_at", "-id"]
        indexes = [models.Index(fields=["status", "preempt_at"], name="billing_pre_status_402260_idx")]

    def __str__(self) -> str:
        return f"{self.instance} preempted at {self.preempt_at:%Y-%m-%d %H:%M:%S}"
