"""Serializer fields shared by every app's API."""

from rest_framework import serializers

from console.validators import moment_in_range


class BoundedDateTimeField(serializers.DateTimeField):
    """An ISO 8601 datetime within the years the console accepts (console.validators):
    a start in year 9999 is a 400, not an overflow further in."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.validators.append(moment_in_range)


def bound_model_datetimes() -> None:
    """Every ModelSerializer's DateTimeField becomes bounded, so no app can forget it."""
    from django.db import models

    serializers.ModelSerializer.serializer_field_mapping[models.DateTimeField] = BoundedDateTimeField
