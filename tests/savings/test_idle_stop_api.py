"""/api/v1/idle-stop-policies/: alice (admin) opts Acme in and off; bob (member) and
charlie (another team) cannot; bad numbers are named."""

from audit.models import AuditEvent
from savings.models import IdleStopPolicy


def test_alice_opts_her_team_in_and_turns_it_off(alice, acme, api):
    made = api(alice).post("/api/v1/idle-stop-policies/", {"team": acme.pk, "idle_minutes": 60}, format="json")
    assert made.status_code == 201, made.json()
    assert made.json()["idle_minutes"] == 60 and made.json()["warn_minutes"] == 10
    pk = made.json()["id"]
    off = api(alice).patch(f"/api/v1/idle-stop-policies/{pk}/", {"enabled": False}, format="json")
    assert off.json()["enabled"] is False
    assert [e for e in AuditEvent.objects.filter(action__startswith="savings.idle_stop").values_list(
        "action", flat=True).order_by("seq")] == ["savings.idle_stop.set", "savings.idle_stop.off"]
    assert api(alice).delete(f"/api/v1/idle-stop-policies/{pk}/").status_code == 204


def test_bob_and_charlie_cannot(bob, charlie, acme, api):
    assert api(bob).post("/api/v1/idle-stop-policies/", {"team": acme.pk, "idle_minutes": 60},
                         format="json").status_code == 403
    assert api(charlie).post("/api/v1/idle-stop-policies/", {"team": acme.pk, "idle_minutes": 60},
                             format="json").status_code == 403
    assert not IdleStopPolicy.objects.exists()


def test_bad_numbers_are_named(alice, acme, api):
    answer = api(alice).post("/api/v1/idle-stop-policies/", {"team": acme.pk, "idle_minutes": 3}, format="json")
    assert answer.status_code == 400 and "idle_minutes" in answer.json()
    answer = api(alice).post("/api/v1/idle-stop-policies/", {"team": acme.pk, "idle_minutes": 30,
                                                             "warn_minutes": 45}, format="json")
    assert answer.status_code == 400 and "warn_minutes" in answer.json()
    assert not IdleStopPolicy.objects.exists()
