"""Page forms: they parse; the views call services, whose errors land back on the form."""

from datetime import UTC
from decimal import Decimal

from django import forms
from django.core.exceptions import ValidationError

from console.forms import apply_errors
from console.models import Team
from console.tenancy import ADMIN_ROLES
from console.validators import moment_in_range
from instances.models import GpuModel

from . import budgets
from .models import PriceKind, Term


class TeamChoice(forms.ModelChoiceField):
    def label_from_instance(self, obj):
        return obj.name


def _thresholds(text: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise ValidationError("Whole percentages separated by commas, e.g. 50, 80, 100.") from None


def _utc(value):
    return value.astimezone(UTC) if value is not None else None


class AdminTeamForm(forms.Form):
    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        teams = Team.objects.for_user(user, ADMIN_ROLES)
        # One team to choose from: it is the choice (no empty "---------" to pick first);
        # with several (an operator's), the form asks.
        self.fields["team"] = TeamChoice(queryset=teams, **({"empty_label": None} if teams.count() == 1 else {}))
        self.order_fields(["team"])

    def apply_errors(self, exc: ValidationError) -> None:
        apply_errors(self, exc)


class BudgetForm(AdminTeamForm):
    month = forms.DateField(input_formats=["%Y-%m"], widget=forms.DateInput(attrs={"type": "month"}),
                            help_text="Calendar month (UTC)")
    # The service's own rule (billing.budgets), so that the browser's check and the
    # server's answer agree: more than zero, in whole cents.
    amount = forms.DecimalField(max_digits=16, decimal_places=2, min_value=Decimal("0.01"),
                                error_messages={"min_value": budgets.POSITIVE, "max_decimal_places": budgets.POSITIVE})
    actual_thresholds = forms.CharField(initial="50, 80, 100", help_text="Alert at these % of actual spend")
    forecast_thresholds = forms.CharField(initial="100", required=False, help_text="…and of the month-end forecast")
    recurring = forms.BooleanField(required=False, label="Every month",
                                   help_text="Carry this budget into each next month until changed")

    def clean_actual_thresholds(self):
        return _thresholds(self.cleaned_data["actual_thresholds"])

    def clean_forecast_thresholds(self):
        return _thresholds(self.cleaned_data.get("forecast_thresholds") or "")


class ReservationForm(AdminTeamForm):
    gpu_model = forms.ModelChoiceField(queryset=GpuModel.objects.all(), to_field_name="name", label="GPU model")
    gpu_count = forms.IntegerField(min_value=1, max_value=100_000, label="GPUs")
    term = forms.ChoiceField(choices=Term.choices)
    start = forms.DateTimeField(validators=[moment_in_range], widget=forms.DateTimeInput(attrs={"type": "datetime-local"}), help_text="UTC")

    def clean_start(self):
        return _utc(self.cleaned_data["start"])


class PriceForm(forms.Form):
    sku = forms.CharField(max_length=100, label="SKU", help_text="GPU model, or <model>:<mig|vgpu>:<profile>")
    kind = forms.ChoiceField(choices=PriceKind.choices)
    hourly = forms.DecimalField(max_digits=14, decimal_places=6, min_value=0, label="Price per hour")
    effective_from = forms.DateTimeField(validators=[moment_in_range], widget=forms.DateTimeInput(attrs={"type": "datetime-local"}), help_text="UTC")
    effective_until = forms.DateTimeField(validators=[moment_in_range], required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))

    def clean_effective_from(self):
        return _utc(self.cleaned_data["effective_from"])

    def clean_effective_until(self):
        return _utc(self.cleaned_data.get("effective_until"))

    apply_errors = AdminTeamForm.apply_errors


class SpotPriceForm(forms.Form):
    sku = forms.CharField(max_length=100, label="SKU")
    hourly = forms.DecimalField(max_digits=14, decimal_places=6, min_value=0, label="Spot price per hour")

    apply_errors = AdminTeamForm.apply_errors
