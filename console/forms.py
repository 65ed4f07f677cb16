from django import forms

from .validators import plain_name


class TokenForm(forms.Form):
    name = forms.CharField(max_length=80, validators=[plain_name], help_text="What this token is for, e.g. ci-pipeline")
