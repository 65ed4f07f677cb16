from django import forms

from console.models import Team
from console.tenancy import WRITE_ROLES
from console.validators import plain_name

from . import launch_options
from .models import LAUNCHABLE, GpuModel, Image, PricingModel, Region, SliceProfile
from .placement import MAX_GPUS_PER_INSTANCE


class ImageSelect(forms.Select):
    """Each option names the GPU models its image supports (``data-models``), so the form
    offers only the images that can boot the chosen model."""

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        image = getattr(value, "instance", None)
        if image is not None:
            option["attrs"]["data-models"] = " ".join(m.name for m in image.gpu_models.all())
        return option


class LaunchForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    name = forms.CharField(max_length=63, validators=[plain_name])
    gpu_model = forms.ModelChoiceField(queryset=GpuModel.objects.all(), to_field_name="name", empty_label=None, label="GPU model")
    slice_profile = forms.ModelChoiceField(
        queryset=SliceProfile.objects.select_related("gpu_model"), required=False,
        label="Slice (optional)", empty_label="Whole GPUs",
    )
    gpu_count = forms.IntegerField(min_value=1, max_value=MAX_GPUS_PER_INSTANCE, initial=1, label="Count")
    pricing_model = forms.ChoiceField(choices=LAUNCHABLE, initial=PricingModel.ON_DEMAND, label="Pricing")
    max_price = forms.DecimalField(
        max_digits=14, decimal_places=6, required=False, label="Spot max price per GPU-hour (optional)",
        help_text="Spot only: if the spot price rises above it, the instance is preempted after the notice.",
    )
    region = forms.ModelChoiceField(queryset=Region.objects.all(), required=False, empty_label="Any region")
    image = forms.ModelChoiceField(
        queryset=Image.objects.none(), required=False, empty_label="Default for the GPU model", widget=ImageSelect,
        error_messages={"invalid_choice": "No such image, or it is private to another team."},
    )

    field_order = ["team", "name", "gpu_model", "slice_profile", "gpu_count", "image", "pricing_model", "max_price",
                   "region", "subnet", "security_groups"]

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        offer_launch_choices(self, user)
        launch_options.add_fields(self, user)
        self.order_fields(self.field_order)

    def clean(self):
        data = super().clean()
        profile, model = data.get("slice_profile"), data.get("gpu_model")
        if profile is not None and model is not None and profile.gpu_model_id != model.pk:
            self.add_error("slice_profile", f"{profile} is not a profile of {model}.")
        launch_options.clean(self, data)
        return data


def offer_launch_choices(form: forms.Form, user) -> None:
    """What a launch-like form (an instance, a job, a scaling group's template) offers
    ``user``: the teams it may launch for, and the images it may boot, each labelled."""
    form.fields["team"].queryset = Team.objects.for_user(user, WRITE_ROLES)
    form.fields["image"].queryset = (Image.objects.for_user(user).launchable()
                                     .select_related("team").prefetch_related("gpu_models"))
    form.fields["image"].label_from_instance = image_label


def image_label(image: Image) -> str:
    what = " ".join(p for p in (image.framework, image.framework_version) if p)
    cuda = f"CUDA {image.cuda_version}" if image.cuda_version else ""
    owner = f"{image.team.name}, private" if image.team_id else ""
    extra = ", ".join(p for p in (what, cuda, owner) if p)
    return f"{image.name} ({extra})" if extra else image.name


class ImageForm(forms.Form):
    """A team adds its own image by registry reference; operators may add public ones."""

    owner = forms.ChoiceField(label="Visibility")
    name = forms.CharField(max_length=63, validators=[plain_name])
    reference = forms.CharField(max_length=512, label="Registry reference",
                                help_text="registry/repository[:tag][@sha256:digest], e.g. nvcr.io/nvidia/pytorch:24.10-py3")
    framework = forms.CharField(max_length=40, required=False, validators=[plain_name])
    framework_version = forms.CharField(max_length=20, required=False, validators=[plain_name], label="Framework version")
    cuda_version = forms.RegexField(r"^\d{1,2}\.\d{1,2}(\.\d{1,3})?$", max_length=12, required=False,
                                    label="CUDA version", error_messages={"invalid": "A CUDA version, e.g. 12.6."})
    gpu_models = forms.ModelMultipleChoiceField(queryset=GpuModel.objects.all(), to_field_name="name",
                                                widget=forms.CheckboxSelectMultiple, label="GPU models it supports")
    size_gb = forms.DecimalField(min_value=0, max_value=10_000, decimal_places=3, required=False,
                                 label="Size (GB, optional)")

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.teams = {str(t.pk): t for t in Team.objects.for_user(user, WRITE_ROLES, operators=False)}
        choices = [(pk, f"Private to {t.name}") for pk, t in self.teams.items()]
        if user.is_staff:
            choices.insert(0, ("public", "Public (every team)"))
        self.fields["owner"].choices = choices

    def clean_reference(self):
        from django.core.exceptions import ValidationError

        from .images import parse_reference

        try:
            return str(parse_reference(self.cleaned_data["reference"]))
        except ValidationError as exc:
            raise forms.ValidationError(exc.messages) from None

    @property
    def team(self):
        return self.teams.get(self.cleaned_data["owner"])

    @property
    def size_bytes(self):
        size = self.cleaned_data.get("size_gb")
        return None if size is None else int(size * 10**9)
