"""One set of filters for the audit page, the API and exports."""

import django_filters
from django import forms
from django.db.models import TextField
from django.db.models.functions import Cast

from console.validators import clamp_moment, no_control_characters

from .models import ActorType, AuditEvent, Outcome

_TEXT = {"validators": [no_control_characters]}


class IdFilter(django_filters.NumberFilter):
    field_class = forms.IntegerField


class BoundFilter(django_filters.IsoDateTimeFilter):
    """A time bound, clamped into the years the console knows (``clamp_moment``)."""

    def filter(self, qs, value):
        return super().filter(qs, None if value is None else clamp_moment(value))


class AuditEventFilter(django_filters.FilterSet):
    since = BoundFilter(
        field_name="time",
        lookup_expr="gte",
        help_text="Events at or after this time (ISO 8601, UTC).",
    )
    until = BoundFilter(
        field_name="time", lookup_expr="lt", help_text="Events before this time (ISO 8601, UTC)."
    )
    actor = django_filters.CharFilter(
        field_name="actor_name",
        lookup_expr="iexact",
        max_length=150,
        help_text="Username, host or 'system'.",
        **_TEXT,
    )
    actor_type = django_filters.ChoiceFilter(choices=ActorType.choices)
    team = IdFilter(field_name="team_id", min_value=1, help_text="Team id.")
    action = django_filters.CharFilter(
        method="filter_action",
        max_length=64,
        help_text="An action, or a prefix ending in '*' (instance.*).",
        **_TEXT,
    )
    outcome = django_filters.ChoiceFilter(choices=Outcome.choices)
    target_type = django_filters.CharFilter(
        max_length=64, help_text="e.g. instances.instance", **_TEXT
    )
    target_id = django_filters.CharFilter(max_length=64, **_TEXT)
    q = django_filters.CharFilter(
        method="filter_details",
        max_length=200,
        help_text="Free text searched in the event details.",
        **_TEXT,
    )

    class Meta:
        model = AuditEvent
        fields = []

    def filter_action(self, queryset, name, value):
        if value.endswith("*"):
            return queryset.filter(action__startswith=value[:-1])
        return queryset.filter(action=value)

    def filter_details(self, queryset, name, value):
        return queryset.annotate(details_text=Cast("details", TextField())).filter(
            details_text__icontains=value
        )

    def clean_bounds(self) -> None:
        data = self.form.cleaned_data
        if data.get("since") and data.get("until") and data["since"] >= data["until"]:
            self.form.add_error("until", "'until' must be after 'since'.")

    def is_valid(self) -> bool:
        valid = super().is_valid()
        if valid:
            self.clean_bounds()
        return valid and not self.form.errors


def filter_values(form: forms.Form) -> dict:
    """The filters actually used, for the export's own audit event and file header."""
    return {
        k: (v.isoformat() if hasattr(v, "isoformat") else v)
        for k, v in form.cleaned_data.items()
        if v not in (None, "")
    }
