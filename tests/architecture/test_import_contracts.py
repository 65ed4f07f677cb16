"""The shape of the code, enforced: apps import one way, down the layers that
docs/architecture.md draws, and no two modules of one package import each other,
however indirectly (imports inside functions count; ``if TYPE_CHECKING:`` ones do not,
since they never run)."""

import grimp
import pytest

# Top to bottom. An app may import the apps below it, never one above it nor a
# sibling in its own layer.
LAYERS = [
    ("gpuconsole",),
    ("savings", "jobs", "scaling"),
    ("billing", "network"),
    ("alerting",),
    ("monitoring",),
    ("instances",),
    ("audit",),
    ("console",),
]
PACKAGES = [app for layer in LAYERS for app in layer] + ["agent"]


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph(*PACKAGES, cache_dir=None, exclude_type_checking_imports=True)


def _describe(dependency) -> str:
    routes = "; ".join(" -> ".join([min(route.heads), *route.middle, min(route.tails)]) for route in dependency.routes)
    return f"{dependency.importer} imports {dependency.imported}: {routes}"


def test_apps_import_only_the_layers_below_them(graph):
    layers = [grimp.Layer(*layer, independent=True) for layer in LAYERS]
    illegal = graph.find_illegal_dependencies_for_layers(layers=layers)
    assert not illegal, "\n".join(sorted(_describe(d) for d in illegal))


def _cycles(graph, package: str) -> list[list[str]]:
    """Strongly connected groups of two or more modules inside ``package`` (Tarjan)."""
    modules = sorted(graph.find_descendants(package) | {package})
    inside = set(modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & inside) for m in modules}
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(root):
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(edges[child])))
            elif child in on_stack:
                low[node] = min(low[node], index[child])

    for module in modules:
        if module not in index:
            visit(module)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_two_modules_of_a_package_import_each_other(graph, package):
    cycles = _cycles(graph, package)
    assert not cycles, "\n".join(" <-> ".join(group) for group in cycles)


def test_the_cycle_finder_sees_an_indirect_cycle():
    graph = grimp.ImportGraph()
    for name in ("pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d"):
        graph.add_module(name)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    graph.add_import(importer="pkg.d", imported="pkg.a")
    assert _cycles(graph, "pkg") == [["pkg.a", "pkg.b", "pkg.c"]]


def test_the_layer_check_sees_an_upward_import():
    graph = grimp.ImportGraph()
    for name in ("top", "top.views", "bottom", "bottom.models"):
        graph.add_module(name)
    graph.add_import(importer="bottom.models", imported="top.views")
    assert graph.find_illegal_dependencies_for_layers(layers=[grimp.Layer("top"), grimp.Layer("bottom")])
