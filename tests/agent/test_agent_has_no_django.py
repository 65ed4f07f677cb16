"""The agent is a separate deployable: nothing of it may reach Django or the console."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import grimp

import agent

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("django", "channels", "rest_framework", "console", "monitoring", "billing", "audit", "instances",
             "jobs", "network", "savings", "scaling", "alerting", "gpuconsole")


def _modules() -> list[str]:
    return ["agent", *(m.name for m in pkgutil.walk_packages(agent.__path__, "agent."))]


def test_no_module_of_the_agent_imports_django_or_the_console():
    graph = grimp.build_graph("agent", include_external_packages=True, cache_dir=None)
    found = [
        (importer, imported)
        for module in graph.modules if module.startswith("agent")
        for importer, imported in ((module, i) for i in graph.find_modules_directly_imported_by(module))
        if imported.split(".")[0] in FORBIDDEN
    ]
    assert found == []


def test_the_graph_sees_the_agents_own_modules():
    graph = grimp.build_graph("agent", include_external_packages=True, cache_dir=None)
    assert "agent.protocol" in graph.find_modules_directly_imported_by("agent.uplink")
    assert "websockets" in {m.split(".")[0] for m in graph.find_modules_directly_imported_by("agent.uplink")}


def test_importing_every_agent_module_loads_no_django():
    modules = [m for m in _modules() if m != "agent.__main__"]  # __main__ runs the agent
    code = (f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
            f"print(sorted({{n.split('.')[0] for n in sys.modules}} & {set(FORBIDDEN)!r}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
    assert "agent.cli" in modules and "agent.runner" in modules and "agent.backends.nvml" in modules
