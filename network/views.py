"""Network pages: VPCs with their subnets, security groups with their rules. Thin: scope
with ``for_user``, read, call a service, show its named errors on the form."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Q
from django.shortcuts import get_object_or_404, redirect, render

from console.forms import apply_errors
from console.policy import may, policy_required, require
from console.validators import whole_number

from . import interfaces, security_groups, vpcs
from .forms import GroupForm, RuleForm, SubnetForm, VpcForm
from .models import Interface, SecurityGroup, SecurityRule, Vpc


@policy_required("signed_in")
def vpc_list(request):
    form = VpcForm(request.POST or None, user=request.user)
    if request.method == "POST":
        require(request.user, "team.write", message="Your role does not allow you to create VPCs.")
        if form.is_valid():
            data = form.cleaned_data
            try:
                vpc = vpcs.create_vpc(actor=request.user, team=data["team"], name=data["name"], cidr=data["cidr"])
            except ValidationError as exc:
                apply_errors(form, exc)
            else:
                messages.success(request, f"VPC {vpc.name} ({vpc.cidr}) created.")
                return redirect("vpc-detail", pk=vpc.pk)
    shown = (Vpc.objects.for_user(request.user).select_related("team").prefetch_related("subnets")
            .annotate(instances=Count("subnets__interfaces", filter=Q(subnets__interfaces__released_at__isnull=True))))
    context = {"vpcs": shown, "form": form, "may_create": may(request.user, "team.write")}
    return render(request, "network/vpcs.html", context, status=400 if request.method == "POST" else 200)


@policy_required("signed_in")
def vpc_detail(request, pk):
    vpc = get_object_or_404(Vpc.objects.for_user(request.user).select_related("team"), pk=pk)
    form = SubnetForm(request.POST or None)
    if request.method == "POST":
        require(request.user, "team.write", vpc, "Your role does not allow you to create subnets.")
        if form.is_valid():
            try:
                subnet = vpcs.create_subnet(actor=request.user, vpc=vpc, **form.cleaned_data)
            except ValidationError as exc:
                apply_errors(form, exc)
            else:
                messages.success(request, f"Subnet {subnet.name} ({subnet.cidr}) created.")
                return redirect("vpc-detail", pk=vpc.pk)
    subnets = vpc.subnets.annotate(used=Count("interfaces", filter=Q(interfaces__released_at__isnull=True)))
    interfaces = (Interface.objects.filter(subnet__vpc=vpc, released_at__isnull=True)
                  .select_related("instance", "subnet").prefetch_related("groups"))
    context = {"vpc": vpc, "subnets": subnets, "interfaces": interfaces, "form": form,
               "may_change": may(request.user, "team.write", vpc)}
    return render(request, "network/vpc_detail.html", context, status=400 if request.method == "POST" else 200)


@policy_required("signed_in")
def group_list(request):
    form = GroupForm(request.POST or None, user=request.user)
    if request.method == "POST":
        require(request.user, "team.write", message="Your role does not allow you to create security groups.")
        if form.is_valid():
            data = form.cleaned_data
            try:
                group = security_groups.create_group(actor=request.user, team=data["team"], name=data["name"],
                                              description=data["description"])
            except ValidationError as exc:
                apply_errors(form, exc)
            else:
                messages.success(request, f"Security group {group.name} created; add its rules below.")
                return redirect("security-group-detail", pk=group.pk)
    groups = (SecurityGroup.objects.for_user(request.user).select_related("team")
              .annotate(rule_count=Count("rules", distinct=True),
                        members=Count("interfaces", filter=Q(interfaces__released_at__isnull=True), distinct=True)))
    context = {"groups": groups, "form": form, "may_create": may(request.user, "team.write")}
    return render(request, "network/groups.html", context, status=400 if request.method == "POST" else 200)


@policy_required("signed_in")
def group_detail(request, pk):
    group = get_object_or_404(SecurityGroup.objects.for_user(request.user).select_related("team"), pk=pk)
    form = RuleForm(request.POST or None, group=group)
    if request.method == "POST":
        require(request.user, "team.write", group, "Your role does not allow you to change security groups.")
        if form.is_valid():
            try:
                security_groups.add_rule(actor=request.user, group=group, **form.values())
            except ValidationError as exc:
                apply_errors(form, exc)
            else:
                messages.success(request, f"Rule added to {group.name}; its instances' hosts apply it now.")
                return redirect("security-group-detail", pk=group.pk)
    context = {
        "group": group, "form": form, "may_change": may(request.user, "team.write", group),
        "rules": group.rules.select_related("peer_group"),
        "members": (group.interfaces.filter(released_at__isnull=True)
                    .select_related("instance__host__network_rules", "subnet")),
    }
    return render(request, "network/group_detail.html", context, status=400 if request.method == "POST" else 200)


@policy_required("signed_in", methods=["POST"])
def rule_remove(request, pk, rule_id):
    group = get_object_or_404(SecurityGroup.objects.for_user(request.user), pk=pk)
    require(request.user, "team.write", group, "Your role does not allow you to change security groups.")
    rule = get_object_or_404(SecurityRule.objects.filter(group=group), pk=rule_id)
    security_groups.remove_rule(actor=request.user, rule=rule)
    messages.success(request, f"Rule removed from {group.name}.")
    return redirect("security-group-detail", pk=group.pk)


@policy_required("signed_in", methods=["POST"])
def instance_groups(request, pk):
    """Change a running instance's groups from its page."""
    interface = get_object_or_404(Interface.objects.for_user(request.user).select_related("instance"), pk=pk)
    require(request.user, "team.write", interface, "Your role does not allow you to change instances' security groups.")
    ids = [pk for v in request.POST.getlist("security_groups") if (pk := whole_number(v)) is not None]
    try:
        interfaces.set_groups(actor=request.user, interface=interface, groups=ids)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"Security groups of {interface.instance.name} changed.")
    return redirect("instance-detail", pk=interface.instance_id)
