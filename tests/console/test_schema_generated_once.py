"""The OpenAPI schema is generated once per process: it is the same for every caller."""

from drf_spectacular.generators import SchemaGenerator

from console.schema import OnceSchemaGenerator


def test_the_schema_is_generated_once_and_served_alike_to_everyone(client, alice, monkeypatch):
    monkeypatch.setattr(OnceSchemaGenerator, "_schemas", {})
    calls = []
    real = SchemaGenerator.get_schema

    def counted(self, *args, **kwargs):
        calls.append(kwargs.get("public"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SchemaGenerator, "get_schema", counted)
    anonymous = client.get("/api/schema/?format=json")
    client.force_login(alice)
    signed_in = client.get("/api/schema/?format=json")
    yaml = client.get("/api/schema/")
    assert anonymous.status_code == signed_in.status_code == yaml.status_code == 200
    assert anonymous.content == signed_in.content
    assert anonymous.json()["paths"]["/api/v1/invoices/"]
    assert b"/api/v1/invoices/:" in yaml.content
    assert calls == [True]
