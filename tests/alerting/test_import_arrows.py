"""Imports point one way: alerting reads telemetry (and instances, audit); telemetry never
imports alerting, and every other app reaches it only through ``alerting.feed``."""

import grimp
import pytest

APPS = ("gpuconsole", "alerting", "monitoring", "billing", "network", "scaling", "instances", "console", "audit", "jobs", "savings")


def _package(graph, name):
    return graph.find_descendants(name) | {name}


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph(*APPS, cache_dir=None)


def imports_of_alerting(graph) -> set[tuple[str, str]]:
    return {
        (importer, imported)
        for importer in graph.modules - _package(graph, "alerting") - _package(graph, "gpuconsole")  # the shell mounts every app
        for imported in graph.find_modules_directly_imported_by(importer)
        if imported == "alerting" or imported.startswith("alerting.")
    }


def test_monitoring_does_not_import_alerting(graph):
    assert graph.find_shortest_chain(importer="monitoring", imported="alerting", as_packages=True) is None


def test_other_apps_import_only_the_feed(graph):
    found = imports_of_alerting(graph)
    assert {importer.split(".")[0] for importer, _ in found} >= {"billing", "network", "scaling"}
    assert {(i, m) for i, m in found if m != "alerting.feed"} == set()


@pytest.mark.parametrize("app", ["billing", "network", "scaling"])
def test_alerting_imports_none_of_the_apps_that_feed_it(graph, app):
    assert graph.find_shortest_chain(importer="alerting", imported=app, as_packages=True) is None


def test_billing_imports_no_telemetry_page(graph):
    pages = {"monitoring.pages", "monitoring.panels", "monitoring.health_pages"}
    for module in graph.find_descendants("billing"):
        assert not graph.find_modules_directly_imported_by(module) & pages, module


def test_the_telemetry_pages_and_panels_import_one_way(graph):
    assert graph.find_shortest_chain(importer="monitoring.pages", imported="monitoring.panels") is None
