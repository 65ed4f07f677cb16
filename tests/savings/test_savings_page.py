"""The Savings page: alice (admin) sees her team's advice with its reason; bob (member)
does not get the page; dismissing from it sets the advice aside."""

from audit.models import AuditEvent


def test_alice_sees_the_idle_instance_and_why(alice, acme, running, telemetry, client):
    telemetry(running(alice, acme, "held"), mem_gb=70, activity=0)
    client.force_login(alice)
    page = client.get("/savings/").content.decode()
    assert "held" in page and "idle by real activity" in page
    assert "2,190.00" in page or "2190.00" in page
    assert 'href="/savings/"' in page


def test_bob_is_not_shown_the_page(bob, client):
    client.force_login(bob)
    assert client.get("/savings/").status_code == 403
    assert 'href="/savings/"' not in client.get("/").content.decode()


def test_dismissing_from_the_page_is_audited(alice, acme, running, telemetry, client):
    instance = running(alice, acme, "held")
    telemetry(instance, mem_gb=70, activity=0)
    client.force_login(alice)
    client.post(f"/savings/{instance.pk}/dismiss/", {"kind": "stop", "days": ""})
    assert AuditEvent.objects.filter(action="savings.recommendation.dismiss").count() == 1
    assert "Set aside" in client.get("/savings/").content.decode()
