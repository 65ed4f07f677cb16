"""Domain errors answer the API the same way wherever they are raised: console.api.errors
turns a Conflict into 409 and a Refused into 400, each with its code."""

from rest_framework.test import APIRequestFactory

from alerting.services import AlertError
from console.api.errors import exception_handler
from console.errors import Conflict, Refused
from instances.cordon import CordonError
from instances.transitions import LifecycleError


def _answer(exc):
    request = APIRequestFactory().post("/api/v1/anything/")
    return exception_handler(exc, {"request": request})


def test_a_conflict_answers_409_with_its_code():
    for exc in (Conflict("busy"), LifecycleError("final"), AlertError("already resolved")):
        response = _answer(exc)
        assert response.status_code == 409
        assert response.data == {"detail": str(exc), "code": exc.code}
    assert _answer(AlertError("x")).data["code"] == "alert_state"


def test_a_refused_request_answers_400_with_its_code():
    response = _answer(CordonError("The reason is at most 300 characters."))
    assert response.status_code == 400
    assert response.data == {"detail": "The reason is at most 300 characters.", "code": "bad_cordon"}
    assert _answer(Refused("no")).data["code"] == "invalid"
