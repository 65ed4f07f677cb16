from datetime import timedelta

from django import forms
from django.conf import settings
from django.utils import timezone

from .models import Scope, Team
from .validators import plain_name


class TokenForm(forms.Form):
    name = forms.CharField(max_length=80, validators=[plain_name], help_text="What this token is for, e.g. ci-pipeline")
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices, widget=forms.CheckboxSelectMultiple, initial=[Scope.READ],
        help_text="A token used beyond its scopes is refused (403).",
    )
    days = forms.IntegerField(
        label="Expires in (days)", min_value=1)
    teams = forms.ModelMultipleChoiceField(
        queryset=Team.objects.none(), required=False, widget=forms.CheckboxSelectMultiple,
        help_text="Limit the token to these teams; none ticked means all of yours.",
    )

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["days"].initial = settings.API_TOKEN_DEFAULT_DAYS
        self.fields["days"].help_text = f"At most {settings.API_TOKEN_MAX_DAYS} days."
        self.fields["days"].widget.attrs["max"] = settings.API_TOKEN_MAX_DAYS
        if user is not None:
            self.fields["teams"].queryset = Team.objects.for_user(user)

    def clean_days(self):
        days = self.cleaned_data["days"]
        if days > settings.API_TOKEN_MAX_DAYS:
            raise forms.ValidationError(f"A token may live {settings.API_TOKEN_MAX_DAYS} days at most.")
        return days

    @property
    def expires_at(self):
        return timezone.now() + timedelta(days=self.cleaned_data["days"])
