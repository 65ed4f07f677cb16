from django import forms

from console.models import Team
from console.tenancy import WRITE_ROLES
from console.validators import plain_name

from .models import GpuModel, Image, PricingModel, Region, SliceProfile
from .services import MAX_GPUS_PER_INSTANCE


class LaunchForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    name = forms.CharField(max_length=63, validators=[plain_name])
    gpu_model = forms.ModelChoiceField(queryset=GpuModel.objects.all(), to_field_name="name", empty_label=None, label="GPU model")
    slice_profile = forms.ModelChoiceField(
        queryset=SliceProfile.objects.select_related("gpu_model"), required=False,
        label="Slice (optional)", empty_label="Whole GPUs",
    )
    gpu_count = forms.IntegerField(min_value=1, max_value=MAX_GPUS_PER_INSTANCE, initial=1, label="Count")
    pricing_model = forms.ChoiceField(choices=PricingModel.choices, initial=PricingModel.ON_DEMAND, label="Pricing")
    max_price = forms.DecimalField(
        max_digits=14, decimal_places=6, required=False, label="Spot max price per GPU-hour (optional)",
        help_text="Spot only: if the spot price rises above it, the instance is preempted after the notice.",
    )
    region = forms.ModelChoiceField(queryset=Region.objects.all(), required=False, empty_label="Any region")
    image = forms.ModelChoiceField(
        queryset=Image.objects.none(), required=False, empty_label="Default for the GPU model",
        error_messages={"invalid_choice": "No such image, or it is private to another team."},
    )

    field_order = ["team", "name", "gpu_model", "slice_profile", "gpu_count", "image", "pricing_model", "max_price",
                   "region"]

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = Team.objects.for_user(user, WRITE_ROLES)
        self.fields["image"].queryset = (Image.objects.for_user(user).launchable()
                                         .select_related("team").prefetch_related("gpu_models"))
        self.fields["image"].label_from_instance = image_label

    def clean(self):
        data = super().clean()
        profile, model = data.get("slice_profile"), data.get("gpu_model")
        if profile is not None and model is not None and profile.gpu_model_id != model.pk:
            self.add_error("slice_profile", f"{profile} is not a profile of {model}.")
        return data


def image_label(image: Image) -> str:
    what = " ".join(p for p in (image.framework, image.framework_version) if p)
    cuda = f"CUDA {image.cuda_version}" if image.cuda_version else ""
    owner = f"{image.team.name}, private" if image.team_id else ""
    extra = ", ".join(p for p in (what, cuda, owner) if p)
    return f"{image.name} ({extra})" if extra else image.name
