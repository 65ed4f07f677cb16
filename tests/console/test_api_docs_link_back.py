"""The API docs (Swagger UI) lead back to the console and to the API tokens page."""


def test_swagger_has_a_way_back_to_the_console(client, bob):
    client.force_login(bob)
    page = client.get("/api/docs/").content.decode()
    nav = page.split('id="console-nav"')[1].split("</nav>")[0]
    assert 'href="/"' in nav and "Back to the console" in nav and 'href="/account/tokens/"' in nav
    assert 'id="swagger-ui"' in page
