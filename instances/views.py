from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, F, Q
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone

from console.forms import apply_errors
from console.policy import may, policy_required, require

from . import (
    catalog,
    images,
    launch_options,
    lifecycle,
    placement,
    precision,
    transitions,
)
from .forms import ImageForm, LaunchForm
from .models import (
    HOLDING_STATES,
    Gpu,
    GpuModel,
    Host,
    Image,
    Instance,
    Precision,
    State,
    gpu_used_q,
    nvlink_groups,
    nvlink_text,
)

ACTIONS = {
    "start": lifecycle.start_instance,
    "stop": lifecycle.stop_instance,
    "terminate": lifecycle.terminate_instance,
}


def _instances(request):
    return Instance.objects.for_user(request.user).select_related("team", "gpu_model", "slice_profile", "host", "image")


@policy_required("signed_in")
def instance_list(request):
    qs = _instances(request)
    state = request.GET.get("state", "")
    if state in State.values:
        qs = qs.filter(state=state)
    page = Paginator(qs, 50).get_page(request.GET.get("page"))
    costs = catalog.instance_costs(page.object_list, now=timezone.now())
    for i in page.object_list:
        i.cost, i.stuck, i.note = costs.get(i.pk), transitions.is_stuck(i), transitions.state_note(i)
    context = {"page": page, "states": State.choices, "state": state,
               "currency": getattr(settings, "BILLING_CURRENCY", "USD")}
    return render(request, "instances/list.html", context)


@policy_required("signed_in")
def instance_detail(request, pk):
    instance = get_object_or_404(_instances(request).prefetch_related("gpus", "slices", "events__host"), pk=pk)
    can_act = may(request.user, "team.write", instance)
    context = {
        "instance": instance,
        "can_act": can_act,
        "preemption": instance.preemption_notices.filter(status="pending").first(),
        "precisions": Precision.choices,
        "precision_now": precision.current(instance),
        **_cost_context(request, instance),
    }
    return render(request, "instances/detail.html", context)


def _cost_context(request, instance: Instance) -> dict:
    """What the cost block (instances/_cost.html) shows; prices come from billing's book."""
    cost = catalog.instance_costs([instance], now=timezone.now()).get(instance.pk)
    return {
        "cost": cost, "reserved_note": getattr(cost, "note", ""), "stuck": transitions.is_stuck(instance),
        "state_note": transitions.state_note(instance),
        "grace_minutes": int(transitions.stopping_grace().total_seconds() // 60),
        "currency": getattr(settings, "BILLING_CURRENCY", "USD"),
    }


@policy_required("team.write", message="Your role does not allow launching instances.")
def launch(request):
    form = LaunchForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            with launch_options.launching(actor=request.user, team=data["team"], data=data):
                instance = lifecycle.launch_instance(
                    actor=request.user, team=data["team"], name=data["name"], gpu_model=data["gpu_model"],
                    gpu_count=data["gpu_count"], pricing_model=data["pricing_model"],
                    slice_profile=data["slice_profile"], region=data["region"], image=data["image"],
                    max_price=data["max_price"],
                )
        except transitions.LifecycleError as exc:
            form.add_error(None, str(exc))
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Instance {instance.name} launched on {instance.host.name}.")
            return redirect("instance-detail", pk=instance.pk)
    status = 400 if request.method == "POST" else 200
    cordoned = Gpu.objects.filter(Q(cordoned_at__isnull=False) | Q(host__cordoned_at__isnull=False)).count()
    return render(request, "instances/launch.html", {"form": form, "offers": _offers(), "cordoned": cordoned},
                  status=status)



def _offers() -> list[dict]:
    """Every SKU on offer with its on-demand and spot price now and its free capacity."""
    now = timezone.now()
    rows = []
    for model in GpuModel.objects.prefetch_related("slice_profiles"):
        for profile in [None, *model.slice_profiles.all()]:
            sku = profile.sku if profile else model.name
            free, on_one_host = placement.free_capacity(gpu_model=model, slice_profile=profile)
            prices = {p: catalog.quote(sku=sku, pricing_model=p, count=1, team_id=None, at=now) for p in ("on_demand", "spot")}
            rows.append({
                "sku": sku, "model": model.name, "profile": profile, "free": free, "on_one_host": on_one_host,
                "on_demand": getattr(prices["on_demand"], "per_gpu_hour", None),
                "spot": getattr(prices["spot"], "per_gpu_hour", None),
            })
    return rows


@policy_required("signed_in", methods=["POST"])
def instance_action(request, pk, verb):
    instance = get_object_or_404(_instances(request), pk=pk)
    if verb not in ACTIONS and verb != "force-stop":
        return redirect("instance-detail", pk=pk)
    if verb == "force-stop":
        require(request.user, "fleet.operate", message="Only operators can force a stop.")
    require(request.user, "team.write", instance, f"Your role does not allow you to {verb} instances.")
    try:
        ACTIONS.get(verb, lifecycle.force_stop)(actor=request.user, instance=instance)
    except transitions.LifecycleError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"{verb.capitalize()} requested for {instance.name}.")
    return redirect("instance-detail", pk=pk)


@policy_required("signed_in")
def image_list(request):
    """The image catalog: public images and the user's teams' own; adding and retiring."""
    form = ImageForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            image = images.create_image(
                actor=request.user, team=form.team, name=data["name"], reference=data["reference"],
                gpu_models=data["gpu_models"], framework=data["framework"], framework_version=data["framework_version"],
                cuda_version=data["cuda_version"], size_bytes=form.size_bytes,
            )
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Image {image.name} added.")
            return redirect("image-list")
    rows = (Image.objects.for_user(request.user).select_related("team").prefetch_related("gpu_models", "default_for")
            .annotate(running=Count("instances", filter=Q(instances__state__in=HOLDING_STATES)))
            .order_by(F("retired_at").asc(nulls_first=True), F("team").asc(nulls_first=True), "name"))
    for image in rows:
        image.can_retire = not image.retired and may(request.user, "image.manage", image)
    context = {"images": rows, "form": form, "can_add": bool(form.fields["owner"].choices)}
    return render(request, "instances/images.html", context, status=400 if request.method == "POST" else 200)


@policy_required("signed_in", methods=["POST"])
def image_retire(request, pk):
    image = get_object_or_404(Image.objects.for_user(request.user), pk=pk)
    require(request.user, "image.manage", image, "Only operators retire public images, and a team's members its own.")
    try:
        images.retire_image(actor=request.user, image=image)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"Image {image.name} retired: new launches cannot use it; running instances keep it.")
    return redirect("image-list")


@policy_required("fleet.view")
def host_list(request):
    hosts = Host.objects.select_related("region").annotate(
        gpu_count=Count("gpus", distinct=True),
        gpus_used=Count("gpus", filter=gpu_used_q("gpus__"), distinct=True),
        # monitoring keeps each GPU's health verdict (related name "health")
        gpus_failed=Count("gpus", filter=Q(gpus__health__state="failed"), distinct=True),
        gpus_degraded=Count("gpus", filter=Q(gpus__health__state="degraded"), distinct=True),
        gpus_cordoned=Count("gpus", filter=Q(gpus__cordoned_at__isnull=False), distinct=True),
    )
    hosts = list(hosts)
    gpus: dict[int, list[tuple[int, str]]] = {}
    for host_id, index, group in Gpu.objects.filter(host__in=hosts).values_list("host_id", "index", "nvlink_group"):
        gpus.setdefault(host_id, []).append((index, group))
    for host in hosts:
        host.nvlink_text = nvlink_text(nvlink_groups(host.nvlink_group, gpus.get(host.pk, [])))
    return render(request, "instances/hosts.html", {"hosts": hosts})
