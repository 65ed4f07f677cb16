from gpuconsole import schedule


def test_billing_periodic_work_is_scheduled_and_resolves():
    entries = schedule.entries()
    for name in ("billing.meter", "billing.issue-invoices", "instances.preempt-due"):
        seconds, path = entries[name]
        assert seconds > 0 and callable(schedule._resolve(path))


def test_the_billing_api_is_in_the_openapi_schema(api, alice):
    schema = api(alice).get("/api/schema/", HTTP_ACCEPT="application/json").json()
    for path in ("/api/v1/invoices/{id}/", "/api/v1/costs/", "/api/v1/costs/export/", "/api/v1/budgets/",
                 "/api/v1/reservations/", "/api/v1/prices/", "/api/v1/spot-prices/"):
        assert path in schema["paths"], path
    params = {p["name"] for p in schema["paths"]["/api/v1/costs/export/"]["get"]["parameters"]}
    assert {"format", "start", "end"} <= params
