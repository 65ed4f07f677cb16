"""One place that turns domain errors into HTTP answers, and audits denials."""

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from ..errors import Conflict, Refused
from ..events import Outcome, record_event


def exception_handler(exc, context):
    if isinstance(exc, Conflict):
        return Response({"detail": str(exc), "code": exc.code}, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, Refused):
        return Response({"detail": str(exc), "code": exc.code}, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        exc = exceptions.ValidationError(detail)
    if isinstance(exc, RequestDataTooBig):  # a form body read by Django's own parser
        exc = exceptions.ParseError("The request body is larger than the server accepts.", code="too_large")
    if isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    response = drf_exception_handler(exc, context)
    if isinstance(exc, exceptions.PermissionDenied) and response is not None:
        request = context["request"]
        record_event(
            actor=request.user,
            action="api.denied",
            outcome=Outcome.DENIED,
            details={"method": request.method, "path": request.path[:300], "reason": str(exc.detail)[:300]},
        )
    return response
