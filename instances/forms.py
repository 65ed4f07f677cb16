from django import forms

from console.models import Team
from console.tenancy import WRITE_ROLES
from console.validators import plain_name

from .models import GpuModel, PricingModel, Region, SliceProfile
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
    region = forms.ModelChoiceField(queryset=Region.objects.all(), required=False, empty_label="Any region")

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = Team.objects.for_user(user, WRITE_ROLES)

    def clean(self):
        data = super().clean()
        profile, model = data.get("slice_profile"), data.get("gpu_model")
        if profile is not None and model is not None and profile.gpu_model_id != model.pk:
            self.add_error("slice_profile", f"{profile} is not a profile of {model}.")
        return data
