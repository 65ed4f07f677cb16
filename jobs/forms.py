from django import forms

from console.models import Team
from console.validators import moment_in_range, plain_name
from instances.forms import offer_launch_choices
from instances.models import GpuModel, Image
from network.forms import network_fields, offer_network_choices

from .models import MAX_COMMAND_CHARS, Priority


class SubmitForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    name = forms.CharField(max_length=63, validators=[plain_name])
    command = forms.CharField(max_length=MAX_COMMAND_CHARS, widget=forms.Textarea(attrs={"rows": 2}),
                              strip=False)
    gpu_model = forms.ModelChoiceField(queryset=GpuModel.objects.all(), to_field_name="name", empty_label=None,
                                       label="GPU model")
    gpu_count = forms.IntegerField(min_value=1, max_value=10_000, initial=1, label="GPUs")
    image = forms.ModelChoiceField(
        queryset=Image.objects.none(), required=False, empty_label="Default for the GPU model",
        error_messages={"invalid_choice": "No such image, or it is private to another team."},
    )
    priority = forms.ChoiceField(choices=Priority.choices, initial=Priority.LOW)
    deadline = forms.DateTimeField(required=False, label="Start by (UTC, optional)", validators=[moment_in_range],
                                   help_text="A job still queued then is not started.",
                                   widget=forms.DateTimeInput(attrs={"placeholder": "2026-12-31 18:00"}))
    subnet, security_groups = network_fields()

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        offer_launch_choices(self, user)
        offer_network_choices(self, user)
