"""The import graph of objbtf and linkdedup, read from the sources: no
cycle, and every import goes down the layers (docs/architecture.md).

Every ``import`` statement counts, at any depth (a function's own imports,
those under ``if TYPE_CHECKING``), and importing ``a.b.c`` counts as
importing ``a`` and ``a.b`` too, since Python runs their ``__init__``
first (except from a module inside them: they were imported before it).
Imports named in strings (the server's WARM list, a ``-c`` program) are
not read.
"""
from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PACKAGES = ('objbtf', 'linkdedup')

#: The layers, each a list of module-name prefixes (a name or its
#: submodules); a module belongs to the layer of its longest prefix.
LAYERS = {
    # The BTF and ELF formats, and what every layer shares: the package's
    # choice of compiled modules, errors, features, reading input files,
    # a file's BTF, the digest of objbtf's sources.
    'core': ('objbtf', 'objbtf.btf', 'objbtf.elf', 'objbtf.errors', 'objbtf.features',
             'objbtf.regular_files', 'objbtf.btf_file', 'objbtf.source_digest'),
    'dwarf': ('objbtf.dwarf',),
    'encode': ('objbtf.encode', 'objbtf.compiler_btf'),
    'link': ('linkdedup',),
    'inspect': ('objbtf.inspect',),
    'front': ('objbtf.cli', 'objbtf.resident', 'objbtf.__main__'),
}
#: Which layers each layer's modules may import.
MAY_IMPORT = {
    'core': {'core'},
    'dwarf': {'core', 'dwarf'},
    'encode': {'core', 'dwarf', 'encode'},
    'link': {'core', 'link'},
    'inspect': {'core', 'inspect'},
    'front': set(LAYERS),
}


def modules() -> dict[str, Path]:
    """Every module of the packages by dotted name."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob('*.py')):
            parts = path.relative_to(ROOT).with_suffix('').parts
            found['.'.join(parts[:-1] if parts[-1] == '__init__' else parts)] = path
    return found


def _imported(name: str, path: Path, node: ast.Import | ast.ImportFrom,
              known: dict[str, Path]) -> list[str]:
    """The modules of the packages that ``node`` (in module ``name``) imports."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        if node.level:
            package = name if path.name == '__init__.py' else name.rpartition('.')[0]
            base = package.split('.')[:len(package.split('.')) - (node.level - 1)]
            if node.module:
                base.append(node.module)
            module = '.'.join(base)
        else:
            module = node.module or ''
        # ``from a import b``: the module a.b where there is one, else a.
        targets = [f'{module}.{alias.name}' if f'{module}.{alias.name}' in known else module
                   for alias in node.names]
    # The packages above ``name`` were imported before it: no edge to them
    # unless it names one itself.
    above = {'.'.join(name.split('.')[:i]) for i in range(1, name.count('.') + 1)}
    result = []
    for target in targets:
        parts = target.split('.')
        result += [m for m in ('.'.join(parts[:i]) for i in range(1, len(parts)))
                   if m in known and m not in above]
        if target in known:
            result.append(target)
    return result


def import_graph() -> dict[str, set[str]]:
    """Each module's imports of the packages' modules."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[name] = {target for node in ast.walk(tree)
                       if isinstance(node, (ast.Import, ast.ImportFrom))
                       for target in _imported(name, path, node, known)} - {name}
    return graph


def layer_of(module: str) -> str | None:
    best = None
    for layer, prefixes in LAYERS.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + '.')) and \
                    (best is None or len(prefix) > len(best[1])):
                best = (layer, prefix)
    return best[0] if best else None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component that has one
    (Tarjan's algorithm, then a path back to the component's first module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    found = []
    for component in components:
        start = min(component)
        path, seen = [start], {start}
        while True:
            step = min(w for w in graph[path[-1]]
                       if w in component and (w == start or w not in seen))
            if step == start:
                break
            path.append(step)
            seen.add(step)
        found.append(path + [start])
    return found


def test_the_checker_finds_cycles():
    assert cycles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [['a', 'b', 'c', 'a']]
    assert cycles({'a': {'b'}, 'b': set()}) == []


def test_the_graph_sees_every_kind_of_import():
    """Absolute, relative, function-level, and ``from package import module``."""
    graph = import_graph()
    assert 'objbtf.resident.client' in graph['objbtf.cli.entry']            # top, relative
    assert 'objbtf.cli.click_cli' in graph['objbtf.cli.entry']              # in a function
    assert 'objbtf.dwarf.constants' in graph['objbtf.encode.encoder']       # from . import module
    assert 'objbtf.btf.types' in graph['linkdedup.pipeline']                # absolute
    assert 'objbtf' in graph['linkdedup']


def test_no_import_cycle():
    found = cycles(import_graph())
    assert not found, 'import cycles:\n' + '\n'.join(' -> '.join(c) for c in found)


def test_every_module_has_a_layer():
    assert [m for m in import_graph() if layer_of(m) is None] == []


def test_imports_go_down_the_layers():
    """The link reads only the core (the BTF and ELF layers and what they
    share), never the encoder or the command line; the core imports no
    other layer; nothing below the command line imports it."""
    wrong = sorted(f'{module} ({layer_of(module)}) imports {target} ({layer_of(target)})'
                   for module, targets in import_graph().items() for target in targets
                   if layer_of(target) not in MAY_IMPORT[layer_of(module)])
    assert not wrong, '\n'.join(wrong)
