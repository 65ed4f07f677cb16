"""The browser's form for a scaling group. Field types and choices only: every rule on
the values (bounds, min ≤ max, a max price for spot only, the image's rules) is
``services.check_settings``'s, the same for the API and the page."""

from django import forms

from console.models import Team
from console.validators import plain_name
from instances.forms import ImageSelect, offer_launch_choices
from instances.models import LAUNCHABLE, GpuModel, Image, PricingModel
from network.forms import network_fields, offer_network_choices

from .models import MetricSource


class ScalingGroupForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    name = forms.CharField(max_length=48, validators=[plain_name])
    gpu_model = forms.ModelChoiceField(queryset=GpuModel.objects.all(), to_field_name="name", empty_label=None,
                                       label="GPU model")
    gpus_per_instance = forms.IntegerField(initial=1, label="GPUs per instance")
    image = forms.ModelChoiceField(
        queryset=Image.objects.none(), required=False, empty_label="Default for the GPU model", widget=ImageSelect,
        error_messages={"invalid_choice": "No such image, or it is private to another team."},
    )
    pricing_model = forms.ChoiceField(choices=LAUNCHABLE, initial=PricingModel.ON_DEMAND, label="Pricing")
    max_price = forms.DecimalField(
        max_digits=14, decimal_places=6, required=False, label="Spot max price per GPU-hour (optional)",
        help_text="Spot only: above it, the group launches on-demand instead.",
    )
    min_instances = forms.IntegerField(initial=1, label="Minimum instances")
    max_instances = forms.IntegerField(initial=4, label="Maximum instances")
    metric_source = forms.ChoiceField(choices=MetricSource.choices, initial=MetricSource.PUSHED,
                                      label="Queue depth from")
    target_per_instance = forms.IntegerField(
        label="Target per instance",
        help_text="Queued items one instance should work through (with GPU utilization: % busy per instance).",
    )
    scale_out_cooldown_s = forms.IntegerField(initial=120, label="Scale-out cooldown (s)")
    scale_in_cooldown_s = forms.IntegerField(initial=300, label="Scale-in cooldown (s)")
    subnet, security_groups = network_fields()

    def __init__(self, *args, user, group=None, **kwargs):
        if group is not None:
            kwargs.setdefault("initial", {
                "team": group.team_id, "name": group.name, "gpu_model": group.gpu_model.name,
                "gpus_per_instance": group.gpus_per_instance, "image": group.image_id,
                "pricing_model": group.pricing_model, "max_price": group.max_price,
                "min_instances": group.min_instances, "max_instances": group.max_instances,
                "metric_source": group.metric_source, "target_per_instance": group.target_per_instance,
                "scale_out_cooldown_s": group.scale_out_cooldown_s, "scale_in_cooldown_s": group.scale_in_cooldown_s,
                "subnet": group.network.get("subnet"), "security_groups": group.network.get("security_groups", []),
            })
        super().__init__(*args, **kwargs)
        offer_launch_choices(self, user)
        offer_network_choices(self, user)
        if group is not None:  # a group keeps its team and name
            for field in ("team", "name"):
                self.fields[field].disabled = True
            self.fields["team"].queryset = Team.objects.filter(pk=group.team_id)
