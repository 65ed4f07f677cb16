from datetime import timedelta

from django import forms
from django.conf import settings
from django.contrib.auth import forms as auth_forms
from django.core.exceptions import ValidationError
from django.utils import timezone

from .models import Role, Scope, Team
from .services import scopes_for
from .validators import plain_name, whole_number


class ModelIdsField(forms.ModelMultipleChoiceField):
    """Rows chosen by id (teams, security groups). Each value must be a whole number up to
    a bigint before the ``pk__in`` lookup runs: a larger one overflows SQLite's integer
    there (a single choice's lookup has no such trouble)."""

    def _check_values(self, value):  # after clean's list check and prepare_value: a list of ids
        for pk in value:
            if whole_number(pk) is None:
                raise ValidationError(self.error_messages["invalid_pk_value"], code="invalid_pk_value",
                                      params={"pk": pk})
        return super()._check_values(value)


def apply_errors(form: forms.Form, exc: ValidationError) -> None:
    """A service's ValidationError on the form: each message on its field where the form
    has one, the rest on the form as a whole (the services hold the rules; forms show them)."""
    for field, messages in (exc.message_dict if hasattr(exc, "error_dict") else {None: exc.messages}).items():
        form.add_error(field if field in form.fields else None, messages)


class TokenForm(forms.Form):
    name = forms.CharField(max_length=80, validators=[plain_name], help_text="What this token is for, e.g. ci-pipeline")
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices, widget=forms.CheckboxSelectMultiple, initial=[Scope.READ],
        help_text="A token used beyond its scopes is refused (403).",
    )
    days = forms.IntegerField(
        label="Expires in (days)", min_value=1)
    teams = ModelIdsField(
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
            allowed = scopes_for(user)
            self.fields["scopes"].choices = [(v, label) for v, label in Scope.choices if v in allowed]

    def clean_days(self):
        days = self.cleaned_data["days"]
        if days > settings.API_TOKEN_MAX_DAYS:
            raise forms.ValidationError(f"A token may live {settings.API_TOKEN_MAX_DAYS} days at most.")
        return days

    @property
    def expires_at(self):
        return timezone.now() + timedelta(days=self.cleaned_data["days"])


class CodeForm(forms.Form):
    code = forms.CharField(
        max_length=16, label="Code",
        help_text="The 6-digit code from your authenticator app, or one of your recovery codes.",
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "inputmode": "text", "autofocus": True}),
    )


class EnrolForm(CodeForm):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["code"].help_text = "The 6-digit code your app shows now."


class PasswordChangeForm(auth_forms.PasswordChangeForm):
    """Django's, whose new password goes through AUTH_PASSWORD_VALIDATORS."""


class InviteForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), empty_label=None)
    email = forms.EmailField(max_length=254)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def __init__(self, *args, teams=None, **kwargs):
        super().__init__(*args, **kwargs)
        if teams is not None:
            self.fields["team"].queryset = teams


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


class SignUpForm(auth_forms.UserCreationForm):
    """A new account from an invitation: Django's form, so the password goes through
    AUTH_PASSWORD_VALIDATORS."""

    class Meta(auth_forms.UserCreationForm.Meta):
        fields = ("username",)
