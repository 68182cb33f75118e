"""The Kbuild integration (kbuild-integration/) on a real Linux 6.1 build.

The quick tests apply the patches to a copy of the files they change. The
kernel tests build a fresh, patched copy of the source with the reference
configuration and ``make OBJBTF=objbtf vmlinux modules`` once per session
(kbuild_tree.py, the ``kbuild_6_1`` fixture: about 10 to 20 minutes on 2
cores), then check what the build made.
"""
from __future__ import annotations

import difflib
import hashlib
import os
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from btf_content import extra_funcs, named_types, percpu_symbols, unexplained
from btf_shapes import kind_counts
from conftest import FIXTURES, need, objbtf, run
from kbuild_tree import (INTEGRATION, REFERENCE_MODULES, KernelBuild, added_files, apply,
                         assert_the_running_kernel_accepts, assert_valid_split_btf, vdso_image,
                         blob_length, kernel_source, layout_files, patched_files,
                         objbtf_command, patched_source, quick_command, sections, touched,
                         vmlinux_members)
from kernel_matrix import VERSIONS
from newest_pahole import NEWEST_PAHOLE_FLAGS, funcs
from objbtf.btf import Kind, parse_btf
from objbtf.btf.distilled import check_distilled_base
from objbtf.btf.header import BtfHeader
from objbtf.btf_file import load_btf_file
from objbtf.inspect.diff import function_decls
from objbtf.elf.reader import ElfFile
from objbtf.features import DEFAULT, Features
from saved_commands import first_command, saved_command


def patches(version: str) -> list[Path]:
    return sorted((INTEGRATION / f'linux-{version}').glob('*.patch'))


def digest(tree: Path) -> dict[str, str]:
    return {str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(tree.rglob('*')) if p.is_file()}


# --- apply, on the files it patches ------------------------------------------

def apply_tree(tmp_path: Path, version: str) -> Path:
    """The files of Linux ``version`` that apply reads or patches."""
    return kernel_source(tmp_path / 'linux', version,
                         patched_files(version) + layout_files(version))


@pytest.mark.parametrize('version', VERSIONS)
def test_apply_is_idempotent(tmp_path, version):
    tree = apply_tree(tmp_path, version)
    before = digest(tree)
    first = apply(tree)
    assert first.returncode == 0, first.stderr
    count = len(patches(version))      # every patch of the version's directory, in order
    assert first.stdout.splitlines() == [f'Linux {version} layout'] + \
        [f'applied: {p.name}' for p in patches(version)]
    patched = digest(tree)
    assert set(patched) == set(before) | set(added_files(version))
    assert 'scripts/btf-objects.lds' in added_files(version)
    assert all(patched[f] != before[f] for f in patched_files(version))
    [rules] = [f for f in ('scripts/Makefile.build', 'scripts/Makefile.lib')  # (7.2: .lib)
               if f in patched and 'cmd_cc_o_c = ' in (tree / f).read_text()]
    assert '$(cmd_objtool) \\\n\t\t$(cmd_objbtf)' in (tree / rules).read_text()

    second = apply(tree)
    assert second.returncode == 0, second.stderr
    assert second.stdout.count('already applied: ') == count
    assert digest(tree) == patched


def test_apply_takes_a_patch_that_builds_on_an_earlier_one(tmp_path):
    """A later patch of a directory may change a line an earlier one added:
    apply checks and applies them in order, on a fresh tree and on one that
    has the earlier ones already."""
    integration = tmp_path / 'integration'
    shutil.copytree(INTEGRATION, integration)
    patched = apply_tree(tmp_path / 'patched', '6.1')
    assert run(integration / 'apply', patched).returncode == 0
    lib = 'scripts/Makefile.lib'
    old = (patched / lib).read_text()
    new = old.replace('encode -q $(OBJBTF_FLAGS) $@', 'encode -q $(OBJBTF_FLAGS) $(EXTRA) $@')
    assert new != old
    diff = difflib.unified_diff(old.splitlines(True), new.splitlines(True), f'a/{lib}', f'b/{lib}')
    (integration / 'linux-6.1' / '9-extra.patch').write_text('a later patch\n\n' + ''.join(diff))
    names = [p.name for p in patches('6.1')] + ['9-extra.patch']

    again = run(integration / 'apply', patched, check=False)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[1:] == [f'already applied: {n}' for n in names[:-1]] + \
        ['applied: 9-extra.patch']
    assert (patched / lib).read_text() == new
    fresh = apply_tree(tmp_path / 'fresh', '6.1')
    first = run(integration / 'apply', fresh, check=False)
    assert first.stdout.splitlines()[1:] == [f'applied: {n}' for n in names], first.stderr
    assert digest(fresh) == digest(patched)


def set_makefile_version(tree: Path, patchlevel: str) -> None:
    makefile = tree / 'Makefile'
    text = makefile.read_text()
    makefile.write_text(re.sub(r'(?m)^PATCHLEVEL = \d+$', f'PATCHLEVEL = {patchlevel}', text))


@pytest.mark.parametrize('version, damage, expected', [
    ('6.1', 'missing file', 'for 6.1, scripts/Makefile.modfinal is missing'),
    ('6.1', 'moved hook', "for 6.1, scripts/Makefile.build has no 'cmd_cc_o_c = "),
    ('6.1', 'edited context', '2-vmlinux.patch does not apply'),
    # The layout decides, not the version string: each tree claiming the other version.
    ('6.1', 'says 6.12', "for 6.12, scripts/Makefile.btf is missing"),
    ('6.12', 'says 6.1', "for 6.1, scripts/pahole-flags.sh is missing"),
    ('6.12', 'mainline layout', 'for 6.12, scripts/gen-btf.sh exists'),
    ('6.12', 'edited context', '3-modules.patch does not apply'),
    ('7.2', 'says 6.12', "for 6.12, Makefile has no line 'VERSION = 6'"),
    ('7.2', 'edited context', '0001-kbuild-btf-make-vmlinux-s-and-modules-BTF-from-per-o.patch '
     'does not apply'),
])
def test_apply_refuses_an_unknown_tree(tmp_path, version, damage, expected):
    tree = apply_tree(tmp_path, version)
    if damage == 'missing file':
        (tree / 'scripts/Makefile.modfinal').unlink()
    elif damage == 'moved hook':           # as mainline moved cmd_cc_o_c to Makefile.lib
        build = tree / 'scripts/Makefile.build'
        build.write_text(build.read_text().replace('cmd_cc_o_c = ', 'cmd_cc_o_x = '))
    elif damage.startswith('says '):
        set_makefile_version(tree, damage.split('.')[-1])
    elif damage == 'mainline layout':
        (tree / 'scripts/gen-btf.sh').write_text('#!/bin/sh\n')
    elif version == '7.2':
        script = tree / 'scripts/gen-btf.sh'
        script.write_text(script.read_text().replace('--btf_encode_detached=', '--btf_encode_to='))
    elif version == '6.1':
        script = tree / 'scripts/link-vmlinux.sh'
        script.write_text(script.read_text().replace('local pahole_ver\n', 'local ver\n'))
    else:
        modfinal = tree / 'scripts/Makefile.modfinal'
        modfinal.write_text(modfinal.read_text().replace('	+$(call if_changed_except,ld_ko_o,vmlinux)',
                                                         '	+$(call if_changed,ld_ko_o)'))
    before = digest(tree)
    result = apply(tree)
    assert result.returncode == 1
    assert expected in result.stderr, result.stderr
    assert 'Traceback' not in result.stderr and len(result.stderr.splitlines()) == 1
    assert digest(tree) == before


def test_apply_refuses_a_directory_that_is_no_kernel(tmp_path):
    result = apply(tmp_path)
    assert result.returncode == 1
    assert ('is not a Linux tree this integration supports (Linux '
            f'{", ".join(VERSIONS)})') in result.stderr


# --- the command every make of a build runs objbtf with ----------------------

#: A Makefile that includes Kbuild.include and runs a sub-make that does the
#: same, each printing what it has in OBJBTF, and what its commands have in
#: their environment (Kconfig and link-vmlinux.sh read it there).
RESOLVE_MAKEFILE = """\
include $(SRC)/scripts/Kbuild.include
all:
\t@echo "top: $(OBJBTF) $$OBJBTF"
\t@$(MAKE) -s -f $(firstword $(MAKEFILE_LIST)) sub
sub:
\t@echo "sub: $(OBJBTF) $$OBJBTF"
"""
#: Stands for objbtf: logs each call; ``server command`` prints its argument
#: as the quick command, or fails without one.
FAKE_OBJBTF = """\
#!/bin/sh
echo "$*" >> "$0.log"
[ "$1 $2" = "server command" ] && [ -n "$QUICK" ] && echo "$QUICK" && exit 0
exit 1
"""


#: What the top Makefile sets for each kind of goal before it includes
#: Kbuild.include (``vmlinux``; ``olddefconfig``; ``clean``, ``modules_install``).
GOAL_VARIABLES = {'compile': ['need-compiler=1'], 'config': ['need-compiler=1', 'config-build=1'],
                  'install': []}


@pytest.mark.parametrize('version', VERSIONS)
@pytest.mark.parametrize('quick', ['/opt/objbtf/resident/objbtf-client', ''])
@pytest.mark.parametrize('goal', ['compile', 'config', 'install'])
def test_objbtf_is_asked_once_per_build_for_its_command(tmp_path, version, quick, goal):
    """The patched Kbuild.include asks OBJBTF for its quick command once, in
    the top make, and every sub-make runs objbtf with it; when OBJBTF
    cannot say, OBJBTF as given.  A make that compiles (the top Makefile's
    need-compiler, set before it includes Kbuild.include, as config-build
    is) asks with --start, so that the server starts then; a *config make
    (which needs the compiler too) and one that does not compile (clean,
    install) do not."""
    tree = apply_tree(tmp_path, version)
    assert apply(tree).returncode == 0
    (tmp_path / 'Makefile').write_text(RESOLVE_MAKEFILE)
    fake = tmp_path / 'objbtf'
    fake.write_text(FAKE_OBJBTF)
    fake.chmod(0o755)
    r = run('make', '-s', '-C', tmp_path, f'SRC={tree}', f'OBJBTF={fake}',
            *GOAL_VARIABLES[goal], env={**os.environ, 'QUICK': quick})
    expected = quick or str(fake)
    assert r.stdout.splitlines() == [f'top: {expected} {expected}', f'sub: {expected} {expected}']
    asked = 'server command --start' if goal == 'compile' else 'server command'
    assert (tmp_path / 'objbtf.log').read_text().splitlines() == [asked]
    top = (tree / 'Makefile').read_text()
    included = top.index('\ninclude $(srctree)/scripts/Kbuild.include')
    assert top.index('\nneed-compiler') < included and top.index('config-build := 1') < included


def test_the_real_objbtf_names_its_quick_command(tmp_path):
    """What the patched Kbuild.include gets from the installed objbtf is what
    ``objbtf server command`` prints: the quick client."""
    tree = apply_tree(tmp_path, '6.1')
    assert apply(tree).returncode == 0
    (tmp_path / 'Makefile').write_text(RESOLVE_MAKEFILE)
    r = run('make', '-s', '-C', tmp_path, f'SRC={tree}', f'OBJBTF={objbtf_command()}')
    quick = quick_command()
    assert quick != objbtf_command()
    assert r.stdout.splitlines() == [f'top: {quick} {quick}', f'sub: {quick} {quick}']


# --- a real build -------------------------------------------------------------

#: The builds of each version through the integration with gcc, each made
#: once per run (kernel_matrix.py).
BUILT = ['kbuild_6_1', 'kbuild_6_12', 'kbuild_7_2']


@pytest.fixture(scope='module', params=BUILT)
def kbuild(request) -> KernelBuild:
    return request.getfixturevalue(request.param)


@pytest.fixture(scope='module')
def modules(kbuild):
    """The build's modules: the reference config's three, and on 7.2 those
    its networking options make modules."""
    kos = kbuild.modules()
    assert REFERENCE_MODULES <= {ko.name for ko in kos}
    assert all(ko.exists() for ko in kos)
    return kos


@pytest.mark.kernel
def test_objects_carry_btf_and_other_elf_files_do_not(kbuild):
    fork = sections(kbuild.build / 'kernel/fork.o')
    assert '.BTF' in fork and '.rela.BTF' in fork
    # The vDSO image is an ELF file mapped into every process: no BTF there.
    assert '.BTF' not in sections(vdso_image(kbuild.build))


@pytest.mark.kernel
def test_objects_are_encoded_through_the_quick_command(kbuild):
    """make OBJBTF=objbtf encodes each object with what ``objbtf server
    command`` prints, not by starting the objbtf script."""
    saved = saved_command(kbuild.build / 'kernel/fork.o')
    assert f'; {quick_command()} encode -q ' in saved


@pytest.mark.kernel
def test_links_check_their_objects_and_are_quiet(kbuild, modules):
    """vmlinux's and each module's objbtf link get the list of their objects
    (vmlinux.a, the .mod file), and so fail on one built without objbtf;
    they print no summary without V=1."""
    assert 'objbtf link' not in kbuild.stderr
    script = kbuild.btf_script.read_text()
    assert '--objects vmlinux.a' in script
    for ko in modules:
        saved = saved_command(ko)
        if kbuild.btf_script.name == 'gen-btf.sh':       # 7.x: the module's .mod from its .ko
            assert f'gen-btf.sh --btf_base ./vmlinux {ko.relative_to(kbuild.build)}' \
                in ' '.join(saved.split()) and '--objects "${ELF_FILE%.ko}.mod"' in script
        else:
            assert f'--objects {ko.relative_to(kbuild.build).with_suffix(".mod")}' in saved


@pytest.mark.kernel
def test_configure_is_quiet_unless_a_step_fails(tmp_path_factory, tmp_path):
    """configure prints nothing when it succeeds (tinyconfig alone lists
    every value it overrides); when a step fails, that step's output, then
    which command failed."""
    src = patched_source(tmp_path_factory.getbasetemp(), '6.1')
    configured = run(INTEGRATION / 'configure', src, tmp_path / 'build')
    assert configured.stdout == configured.stderr == ''
    assert 'CONFIG_DEBUG_INFO_BTF=y' in (tmp_path / 'build/.config').read_text()
    result = run(INTEGRATION / 'configure', src, tmp_path / 'other', 'ARCH=none', check=False)
    assert result.returncode == 1
    assert 'arch/none/Makefile' in result.stderr, result.stderr
    assert result.stderr.splitlines()[-1].startswith('configure: failed: make '), result.stderr
    missing = tmp_path / 'no-such.config'
    result = run(INTEGRATION / 'configure', src, tmp_path / 'third', missing, check=False)
    assert result.returncode == 1 and not (tmp_path / 'third').exists()
    assert result.stderr == f'configure: cannot read the fragment {missing}\n'
    result = run(INTEGRATION / 'configure', '--base', 'nonsense', src, tmp_path / 'fourth',
                 check=False)
    assert result.returncode == 2 and '--base wants a config target' in result.stderr


@pytest.mark.kernel
def test_configure_on_defconfig(tmp_path_factory, tmp_path):
    """--base defconfig: the fragments go on x86_64's defconfig (which has
    the e1000 driver built in, tinyconfig not), BTF kept."""
    src = patched_source(tmp_path_factory.getbasetemp(), '6.1')
    run(INTEGRATION / 'configure', '--base', 'defconfig', src, tmp_path / 'build')
    config = (tmp_path / 'build/.config').read_text().splitlines()
    assert 'CONFIG_E1000=y' in config and 'CONFIG_DEBUG_INFO_BTF=y' in config


@pytest.mark.kernel
def test_btf_link_reads_relocated_objects_without_dwarf(kbuild):
    tmp = sections(kbuild.tmp_vmlinux)
    assert not any(name.startswith('.debug_') for name in tmp)
    data, flags = tmp['.BTF.objects']
    assert not flags & 2                                   # SHF_ALLOC
    assert blob_length(data) < len(data)                   # many blobs
    assert '.BTF' not in tmp or not tmp['.BTF'][0]


#: The sections that carry the objects' BTF.
OBJECTS_BTF = {'.BTF', '.BTF.objbtf', '.BTF.addrs'}


@pytest.mark.kernel
def test_vmlinux_o_has_the_objects_btf_only_when_vmlinux_is_linked_from_it(kbuild):
    """modpost's vmlinux.o carries the objects' BTF only where link-vmlinux.sh
    links vmlinux from it, with CONFIG_X86_KERNEL_IBT (6.12's reference
    configuration and 7.2's; 6.1's has it off): else it would be a tenth of the tree."""
    ibt = '\nCONFIG_X86_KERNEL_IBT=y\n' in kbuild.config()
    assert ibt == (kbuild.version != '6.1')
    with ElfFile.open(str(kbuild.build / 'vmlinux.o')) as elf:
        names = {s.name for s in elf.sections}
    assert bool(names & OBJECTS_BTF) == ibt
    assert '.modinfo' in names


@pytest.mark.kernel
def test_vmlinux_has_exactly_one_btf_blob(kbuild):
    vmlinux = sections(kbuild.build / 'vmlinux')
    assert not [n for n in vmlinux if 'BTF' in n and n not in ('.BTF', '.BTF_ids')]
    data, flags = vmlinux['.BTF']
    assert flags & 2                                       # loaded
    assert blob_length(data) == len(data)
    assert data == sections(kbuild.btf_object)['.BTF'][0]


@pytest.mark.kernel
def test_vmlinux_btf_is_valid(kbuild, kernel_loader):
    """objbtf's rules, bpftool, and the running kernel (7.2's BTF, with a
    kind layout section: its own kernel, booted)."""
    vmlinux = kbuild.build / 'vmlinux'
    assert objbtf('check', vmlinux).returncode == 0
    dump = run(need('bpftool'), 'btf', 'dump', 'file', vmlinux)
    assert dump.stdout.count('\n') > 40000
    header = BtfHeader.read(sections(vmlinux)['.BTF'][0])
    assert bool(header.layout_len) == (kbuild.version == '7.2')
    assert_the_running_kernel_accepts(vmlinux)


@pytest.mark.kernel
def test_vmlinux_btf_matches_pahole(kbuild, tmp_path, request):
    """The BTF step the tree's own flow runs, on the same objects, by content
    (btf_content.py): every named type, VAR, DECL_TAG and shared FUNC's
    prototype alike but for the documented differences.  6.x: pahole -J
    (Debian's) on vmlinux, which holds the same objects' DWARF (the
    temporary link has none now); 7.2: gen-btf.sh's step, the newest pahole
    with the tree's flags, then resolve_btfids (stock_btf.py)."""
    vmlinux = kbuild.build / 'vmlinux'
    ours = parse_btf(sections(vmlinux)['.BTF'][0])
    percpu = {name for name, _ in percpu_symbols(vmlinux)}
    if kbuild.btf_script.name == 'gen-btf.sh':
        from stock_btf import stock_vmlinux_btf
        theirs = parse_btf(stock_vmlinux_btf(kbuild, request.getfixturevalue('newest_pahole'),
                                             tmp_path))
        assert unexplained(theirs, ours, percpu, vmlinux_members(kbuild.build)) == []
        assert_funcs_are_the_newest_pahole_s(function_decls(theirs), function_decls(ours),
                                             kbuild)
        assert kind_counts(ours) - Counter(FUNC=1 << 20, FUNC_PROTO=1 << 20) == \
            kind_counts(theirs) - Counter(FUNC=1 << 20, FUNC_PROTO=1 << 20)
        return
    out = tmp_path / 'pahole.btf'
    run(need('pahole'), '-J', '--btf_gen_floats', '--lang_exclude=rust',
        '--btf_encode_detached', out, vmlinux)
    theirs = parse_btf(out.read_bytes())
    assert named_types(theirs) > 1000
    assert unexplained(theirs, ours, percpu, vmlinux_members(kbuild.build)) == []
    a, b = kind_counts(ours), kind_counts(theirs)
    # pahole 1.24 tags no kfunc (docs/pahole-differences.md)
    kfunc_tags = sum(1 for _, t in ours.own()
                     if t.kind is Kind.DECL_TAG and t.name in ('bpf_kfunc', 'bpf_fastcall'))
    assert kfunc_tags > 0 and a['DECL_TAG'] == b['DECL_TAG'] + kfunc_tags
    # pahole misses the percpu variables of .data..percpu..* (docs/pahole-differences.md).
    assert a['VAR'] >= b['VAR'] and a['DATASEC'] == b['DATASEC'] == 1
    if kbuild.version in NEWEST_PAHOLE_FLAGS:      # and the newest pahole's function rules
        assert_funcs_are_the_newest_pahole_s(
            funcs(request.getfixturevalue('newest_pahole'), vmlinux,
                  NEWEST_PAHOLE_FLAGS[kbuild.version]), function_decls(ours), kbuild)


def assert_funcs_are_the_newest_pahole_s(theirs: dict[str, list[str]], ours: dict[str, list[str]],
                                         kbuild: KernelBuild) -> None:
    """Every FUNC of the newest pahole's (``theirs``: function_decls), with
    its prototype; those only objbtf has are functions another unit defines
    inline with another prototype (btf_content.extra_funcs, docs/pahole-differences.md)."""
    problems, _ = extra_funcs(theirs, ours, vmlinux_members(kbuild.build))
    assert problems == []


@pytest.mark.kernel
def test_every_percpu_variable_at_its_symbol(kbuild):
    """Each VAR of .data..percpu at the offset vmlinux's symbol table gives
    its symbol, same-name statics included."""
    btf = parse_btf(sections(kbuild.build / 'vmlinux')['.BTF'][0])
    [percpu] = [t for _, t in btf.own() if t.kind is Kind.DATASEC]
    placed = Counter((btf[v.type].name, v.offset) for v in percpu.items)
    assert placed == percpu_symbols(kbuild.build / 'vmlinux') and len(placed) >= 200


@pytest.mark.kernel
def test_modules_have_valid_split_btf(kbuild, modules):
    vmlinux = kbuild.build / 'vmlinux'
    left = {}
    for ko in modules:
        assert_valid_split_btf(vmlinux, ko)
        secs = sections(ko)
        assert blob_length(secs['.BTF'][0]) == len(secs['.BTF'][0]), ko
        left[ko.name] = sorted(n for n in ('.rela.BTF', '.BTF.objbtf') if secs.get(n, (b'',))[0])
    # Nothing of the per-object BTF stays in a module (it may keep the emptied sections).
    assert left == {ko.name: [] for ko in modules}
    # The module links shared one index of vmlinux's BTF, made for this vmlinux.
    from linkdedup.base_index import index_key, load_index
    raw = sections(vmlinux)['.BTF'][0]
    assert load_index(str(kbuild.build / '.btf.vmlinux.index'), raw, index_key(raw)) is not None


@pytest.mark.kernel
def test_modules_btf_matches_pahole(kbuild, modules, tmp_path, request):
    """Each module's split BTF against the stock step's from the same .ko on
    the same vmlinux BTF (6.x: pahole ``--btf_base``, as the stock
    Makefile.modfinal runs it; 7.2: gen-btf.sh's, stock_btf.py), by content,
    as vmlinux's: the same types, variables and prototypes but for the
    documented differences (btf_content.py)."""
    vmlinux = kbuild.build / 'vmlinux'
    base = parse_btf(sections(vmlinux)['.BTF'][0])
    compared = 0
    if kbuild.btf_script.name == 'gen-btf.sh':
        from stock_btf import deduplicated, pahole_flags, stock_module_btf
        newest, flags = request.getfixturevalue('newest_pahole'), pahole_flags(kbuild)
    for ko in modules:
        if kbuild.btf_script.name == 'gen-btf.sh':
            stock = stock_module_btf(kbuild, newest, flags, ko, tmp_path)
            raw = deduplicated(stock, kbuild)
            # (the newest pahole's copies of base types: stock_btf.py, docs/pahole-differences.md)
            assert len(parse_btf(stock, base)) > len(parse_btf(raw, base)), ko.name
        else:
            out = tmp_path / f'{ko.name}.btf'
            run(need('pahole'), '-J', '--btf_gen_floats', '--lang_exclude=rust', '--btf_base',
                vmlinux, '--btf_encode_detached', out, ko)
            raw = out.read_bytes()
        ours = parse_btf(sections(ko)['.BTF'][0], base)
        theirs = parse_btf(raw, base)
        assert unexplained(theirs, ours, objects=[ko.with_suffix('.o')]) == [], ko.name
        compared += named_types(theirs)
    assert compared >= 10           # tun's and veth's own types, beyond vmlinux's


def link_summaries(verbose: str) -> list[str]:
    """What the links said with V=1: vmlinux's, then each module's."""
    return re.findall(r'^objbtf link: \d+ objects.*$', verbose, re.MULTILINE)


@pytest.mark.kernel
@pytest.mark.relinks
def test_rebuild_after_touching_a_file_gives_the_same_btf(kbuild, modules):
    """No type changed: vmlinux's link replays .btf.vmlinux.cache, with the
    same result, and leaves .btf.vmlinux.types as it was, so no module is
    relinked; their BTF fits the new vmlinux."""
    build = kbuild.build
    stamp = build / '.btf.vmlinux.types'
    clean = sections(build / 'vmlinux')['.BTF'][0]
    kos = {ko: (sections(ko)['.BTF'][0], ko.stat().st_mtime_ns) for ko in modules}
    vmlinux_mtime, stamp_mtime = (build / 'vmlinux').stat().st_mtime_ns, stamp.stat().st_mtime_ns

    kbuild.make('vmlinux', 'modules')      # nothing to do
    assert (build / 'vmlinux').stat().st_mtime_ns == vmlinux_mtime

    fork_mtime = (build / 'kernel/fork.o').stat().st_mtime_ns
    with touched(kbuild.src / 'kernel/fork.c'):
        verbose = kbuild.make('V=1', 'vmlinux', 'modules')
    [summary] = link_summaries(verbose)
    assert '(replayed from the cache)' in summary
    assert (build / 'kernel/fork.o').stat().st_mtime_ns > fork_mtime
    assert (build / 'vmlinux').stat().st_mtime_ns > vmlinux_mtime
    assert sections(build / 'vmlinux')['.BTF'][0] == clean
    assert stamp.stat().st_mtime_ns == stamp_mtime
    assert {ko: (sections(ko)['.BTF'][0], ko.stat().st_mtime_ns) for ko in modules} == kos
    for ko in modules:
        assert_valid_split_btf(build / 'vmlinux', ko)


#: Appended to kernel/fork.c: one more struct and FUNC in vmlinux's BTF.
PROBE = """
struct objbtf_stamp_probe { long a; };
struct objbtf_stamp_probe *objbtf_stamp_probe(void);
struct objbtf_stamp_probe *objbtf_stamp_probe(void) { return NULL; }
"""


@pytest.mark.kernel
@pytest.mark.relinks
def test_a_change_to_vmlinux_types_relinks_every_module(kbuild, modules):
    """A new type in vmlinux rewrites .btf.vmlinux.types: every module is
    linked again, against the new vmlinux; taking it out again gives the
    first build's BTF back, everywhere."""
    build, fork = kbuild.build, kbuild.src / 'kernel/fork.c'
    stamp = build / '.btf.vmlinux.types'
    clean, clean_stamp = sections(build / 'vmlinux')['.BTF'][0], stamp.read_bytes()
    clean_kos = {ko: sections(ko)['.BTF'][0] for ko in modules}
    source, times = fork.read_text(), fork.stat()
    try:
        fork.write_text(source + PROBE)
        verbose = kbuild.make('V=1', 'vmlinux', 'modules')
        assert stamp.read_bytes() != clean_stamp
        # Every module relinked, so written after the stamp; on failure, what
        # make said about the modules.
        stamped = stamp.stat().st_mtime_ns
        assert [ko.name for ko in modules if ko.stat().st_mtime_ns <= stamped] == [], \
            '\n'.join(line for line in verbose.splitlines() if '.ko' in line)
        vmlinux_link = [line for line in link_summaries(verbose)
                        if '.ko' not in line.rsplit(' -> ', 1)[-1]]
        assert len(vmlinux_link) == 1 and '(replayed from the cache)' not in vmlinux_link[0]
        btf = parse_btf(sections(build / 'vmlinux')['.BTF'][0])
        assert any(t.name == 'objbtf_stamp_probe' and t.kind is Kind.STRUCT
                   for _, t in btf.own())
        for ko in modules:
            assert_valid_split_btf(build / 'vmlinux', ko)
    finally:
        fork.write_text(source)         # newer than the probe's fork.o
        kbuild.make('vmlinux', 'modules')
        os.utime(fork, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert sections(build / 'vmlinux')['.BTF'][0] == clean
    assert stamp.read_bytes() == clean_stamp
    assert {ko: sections(ko)['.BTF'][0] for ko in modules} == clean_kos


@pytest.mark.kernel
@pytest.mark.relinks
def test_a_failed_vmlinux_link_fails_the_build(kbuild, modules):
    """When objbtf link fails (here on an option it does not know), the
    build stops with link-vmlinux.sh's message and makes no new vmlinux: it
    does not link in the BTF a previous build left; the next good build
    gives that BTF again."""
    build, vmlinux = kbuild.build, kbuild.build / 'vmlinux'
    clean, made = sections(vmlinux)['.BTF'][0], vmlinux.stat().st_mtime_ns
    stderr = kbuild.make('OBJBTF_LINK_FLAGS=--no-such-option', 'vmlinux', fails=True)
    assert "No such option '--no-such-option'" in stderr
    assert 'Failed to generate BTF for vmlinux' in stderr
    assert not vmlinux.exists() or vmlinux.stat().st_mtime_ns == made
    kbuild.make('vmlinux', 'modules')
    assert sections(build / 'vmlinux')['.BTF'][0] == clean
    for ko in modules:
        assert_valid_split_btf(build / 'vmlinux', ko)


@pytest.mark.kernel
@pytest.mark.relinks
def test_link_flags_relink_and_compile_nothing(kbuild, modules):
    """OBJBTF_LINK_FLAGS reaches vmlinux's link and every module's: setting
    it relinks them (it is in their saved command lines) and compiles no
    object; -j 1 gives the same BTF as the default -j."""
    build = kbuild.build
    btf = sections(build / 'vmlinux')['.BTF'][0]
    kos = {ko: (sections(ko)['.BTF'][0], ko.stat().st_mtime_ns) for ko in modules}
    members = vmlinux_members(build)
    compiled = {m: m.stat().st_mtime_ns for m in members}
    vmlinux_mtime = (build / 'vmlinux').stat().st_mtime_ns

    try:
        kbuild.make('OBJBTF_LINK_FLAGS=-j 1', 'vmlinux', 'modules')
        assert "OBJBTF_LINK_FLAGS='-j 1'" in saved_command(kbuild.linked_vmlinux)
        assert (build / 'vmlinux').stat().st_mtime_ns > vmlinux_mtime
        assert sections(build / 'vmlinux')['.BTF'][0] == btf
        for ko, (ko_btf, mtime) in kos.items():
            assert '-j 1' in saved_command(ko)
            assert ko.stat().st_mtime_ns > mtime
            assert sections(ko)['.BTF'][0] == ko_btf
        assert {m: m.stat().st_mtime_ns for m in members} == compiled
    finally:        # linked as the fixture left it, for the tests after (a kept tree's too)
        kbuild.make('vmlinux', 'modules')


# --- what 6.12 adds -------------------------------------------------------------

def makefile_btf(tmp_path: Path) -> str:
    tree = kernel_source(tmp_path / 'linux', '6.12', ['scripts/Makefile.btf'])
    return (tree / 'scripts/Makefile.btf').read_text()


def test_default_features_are_what_makefile_btf_asks_of_pahole(tmp_path):
    """objbtf's default set is the --btf_features list 6.12's
    scripts/Makefile.btf gives pahole 1.26 and newer (docs/kbuild.md maps the
    rest of the file onto OBJBTF_FLAGS)."""
    text = makefile_btf(tmp_path)
    m = re.search(r'test-ge, \$\(pahole-ver\), 126\)\s*=\s*-j --btf_features=(\S+)', text)
    assert m, 'scripts/Makefile.btf: no --btf_features list for pahole 1.26 and newer'
    asked = m[1].split(',')
    assert sorted(asked) == sorted(DEFAULT)
    assert Features.parse(m[1]).names() == Features().names()
    # Out-of-tree modules also ask for distilled_base, which the patched
    # Makefile.modfinal asks of objbtf link for them (docs/kbuild.md).
    extmod = re.findall(r'module-pahole-flags-.*?\+= --btf_features=(\S+)', text)
    assert extmod == ['distilled_base'] and 'distilled_base' in Features.NAMES


@pytest.fixture(scope='module')
def kmod(kbuild_6_12, tmp_path_factory) -> Path:
    """tests/fixtures/kmod-kfuncs, an out-of-tree module with kfunc sets,
    built against the 6.12 tree with OBJBTF (make M=...): its split BTF is
    on a distilled base (.BTF.base)."""
    src = tmp_path_factory.mktemp('kmod') / 'kmod-kfuncs'
    shutil.copytree(FIXTURES / 'kmod-kfuncs', src)
    kbuild_6_12.make(f'M={src}', 'modules')
    return src / 'objbtf_kfuncs.ko'


def tagged_functions(btf) -> set[tuple[str, str]]:
    """(tag, FUNC name) of every bpf_kfunc or bpf_fastcall DECL_TAG."""
    return {(t.name, btf[t.type].name) for _, t in btf.own()
            if t.kind is Kind.DECL_TAG and t.name in ('bpf_kfunc', 'bpf_fastcall')}


def expected_tags(kfuncs: dict[str, set[str]], btf) -> set[tuple[str, str]]:
    funcs = {t.name for _, t in btf.own() if t.kind is Kind.FUNC}
    return {(tag, name) for name, tags in kfuncs.items() if name in funcs for tag in tags}


@pytest.mark.kernel
def test_marked_kfunc_sets_are_tagged_as_pahole_does(kbuild_6_12):
    """6.12 marks its kfunc sets (BTF_KFUNCS_START): the functions of the
    marked sets get bpf_kfunc, as pahole 1.27+ tags them; the unmarked set8s
    are left alone.  The oracle reads .BTF_ids of the temporary vmlinux (before
    resolve_btfids sorts the sets) with readelf and objcopy."""
    from btf_ids_oracle import btf_ids_kfuncs
    kfuncs, marked = btf_ids_kfuncs(kbuild_6_12.tmp_vmlinux)
    assert marked and len(kfuncs) >= 20
    btf = parse_btf(sections(kbuild_6_12.build / 'vmlinux')['.BTF'][0])
    assert tagged_functions(btf) == expected_tags(kfuncs, btf)


@pytest.mark.kernel
def test_module_kfuncs_are_tagged(kbuild_6_12, kmod):
    """A module's marked kfunc set gets its tags in the module's split BTF;
    its unmarked set8 none, as on vmlinux."""
    from btf_ids_oracle import btf_ids_kfuncs
    vmlinux = kbuild_6_12.build / 'vmlinux'
    assert objbtf('check', '--base', vmlinux, kmod).returncode == 0
    kfuncs, marked = btf_ids_kfuncs(kmod.with_name('objbtf_kfuncs.o'))     # before the BTF
    assert marked and set(kfuncs) == {'objbtf_kf_first', 'objbtf_kf_second'}
    base = parse_btf(sections(vmlinux)['.BTF'][0])
    btf = load_btf_file(str(kmod), base)            # relocated from its distilled base
    assert tagged_functions(btf) == expected_tags(kfuncs, btf) == \
        {('bpf_kfunc', 'objbtf_kf_first'), ('bpf_kfunc', 'objbtf_kf_second')}
    # libbpf reads it too, on its distilled base (Debian's 1.1 cannot relocate).
    dist, split = kmod.parent / 'kmod.BTF.base', kmod.parent / 'kmod.BTF'
    run('objcopy', f'--dump-section=.BTF.base={dist}', f'--dump-section=.BTF={split}', kmod,
        kmod.parent / 'scratch.o')
    dump = run(need('bpftool'), 'btf', 'dump', '-B', dist, 'file', split).stdout
    assert dump.count("DECL_TAG 'bpf_kfunc'") == 2


def assert_ids_resolved(path: Path, btf) -> tuple[int, int]:
    """Every BTF_ID of ``path``'s .BTF_ids holds the id of the type of its
    name in ``btf`` (0 if it has none), every set is sorted; returns how many
    BTF_IDs outside sets name a type of ``btf``, and how many there are."""
    from btf_ids_oracle import btf_ids_entries
    ids: dict[tuple[str, str], set[int]] = {}
    for type_id, t in btf.own():
        ids.setdefault((t.kind.name, t.name), set()).add(type_id)
    single, sets = btf_ids_entries(path)
    wrong = [(kind, name, got) for kind, name, got in single
             if got not in ids.get((kind, name), {0})]
    assert wrong == []
    assert all(ids_ == sorted(ids_) for ids_ in sets)         # resolve_btfids sorts sets
    return sum(1 for kind, name, _ in single if (kind, name) in ids), len(single)


@pytest.mark.kernel
def test_resolve_btfids_ran_on_vmlinux_and_modules(kbuild_6_12, kmod):
    """resolve_btfids, as the stock flow runs it, on objbtf's BTF: the
    .BTF_ids lists of vmlinux and of the module hold the ids of the named
    types in the final BTF (the module's: in its split BTF, after vmlinux's)."""
    vmlinux = kbuild_6_12.build / 'vmlinux'
    base = parse_btf(sections(vmlinux)['.BTF'][0])
    # All of them name a type, as in the stock build's vmlinux (90 of 90 there).
    found, listed = assert_ids_resolved(vmlinux, base)
    assert found == listed >= 50
    # The module's ids are on its distilled base, as resolve_btfids found it
    # there (.BTF.base); the module loader maps them onto vmlinux's.
    split = load_btf_file(str(kmod))
    assert split.base is not None and len(split.base) < 100
    assert assert_ids_resolved(kmod, split) == (2, 2)         # objbtf_list's FUNC and STRUCT
    from btf_ids_oracle import btf_ids_entries
    _, sets = btf_ids_entries(kmod)
    funcs = {t.name: type_id for type_id, t in split.own() if t.kind is Kind.FUNC}
    assert sorted(sets) == sorted([sorted([funcs['objbtf_kf_first'], funcs['objbtf_kf_second']]),
                                   [funcs['objbtf_not_kfunc']]])


@pytest.mark.kernel
def test_out_of_tree_module_gets_a_distilled_base(kbuild_6_12, kmod):
    """The module's split BTF is on a distilled base of its own (.BTF.base),
    as the stock flow's pahole makes it for make M=; relocated onto
    vmlinux's by the kernel's rules (objbtf/btf/distilled.py) it follows
    the kernel's rules there.  An in-tree module's is on vmlinux's."""
    secs = sections(kmod)
    assert '.BTF.base' in secs and secs['.BTF.base'][1] == 0         # not loaded, as .BTF
    dist = parse_btf(secs['.BTF.base'][0])
    check_distilled_base(dist)
    assert {'int', 'long int'} <= {t.name for _, t in dist.own()}
    assert objbtf('check', '--base', kbuild_6_12.build / 'vmlinux', kmod).returncode == 0
    assert '--btf-features default,distilled_base' in saved_command(kmod)
    for ko in kbuild_6_12.modules()[:5]:
        assert '.BTF.base' not in sections(ko) and 'distilled_base' not in saved_command(ko)


def pahole_distilled(pahole: Path, ko: Path, vmlinux: Path, out: Path) -> Path:
    """A copy of ``ko`` with the BTF the newest pahole writes for make M= on
    6.12 (Makefile.btf's list for pahole 1.26 and later, and
    distilled_base): .BTF on a distilled base in .BTF.base."""
    shutil.copyfile(ko, out)
    run(pahole, '-J', f'--btf_features={",".join(DEFAULT)}', '--btf_features=distilled_base',
        '--lang_exclude=rust', '--btf_base', vmlinux, out,
        env={**os.environ, 'LLVM_OBJCOPY': 'objcopy'})
    return out


def loaded_content(libbpf, ko: Path, vmlinux_raw: bytes, base):
    """``ko``'s BTF as the kernel loads it (its .BTF.base relocated onto
    vmlinux's by btf_relocate, libbpf's copy of it), passed through libbpf's
    dedup on vmlinux's, which folds the base types that the distilled base
    made copies of (and the newest pahole's own copies: stock_btf.py) back
    into vmlinux: what is left is the module's own content."""
    from libbpf_oracle import libbpf_dedup
    secs = sections(ko)
    raw = libbpf.relocate(secs['.BTF.base'][0], secs['.BTF'][0], vmlinux_raw)
    assert raw is not None, f'{ko}: the kernel\'s relocation refuses its BTF'
    return parse_btf(libbpf_dedup(raw, vmlinux_raw), base)


@pytest.mark.kernel
def test_out_of_tree_module_btf_is_the_newest_pahole_s(kbuild_6_12, kmod, newest_pahole,
                                                       newest_libbpf, tmp_path):
    """The newest pahole with what 6.12's Makefile.btf gives it for make M=
    on the same .ko and vmlinux: both relocated onto vmlinux's BTF by the
    kernel's rules, the same content (btf_content.py).  (Its distilled
    base has more types: its split BTF keeps copies of base types that
    reach them.)"""
    vmlinux = kbuild_6_12.build / 'vmlinux'
    vmlinux_raw = sections(vmlinux)['.BTF'][0]
    base = parse_btf(vmlinux_raw)
    theirs = pahole_distilled(newest_pahole, kmod, vmlinux, tmp_path / kmod.name)
    ours, stock = (loaded_content(newest_libbpf, ko, vmlinux_raw, base) for ko in (kmod, theirs))
    assert unexplained(stock, ours, objects=[kmod.with_suffix('.o')]) == []
    assert named_types(ours) >= 2


@pytest.mark.kernel
def test_in_tree_modules_distilled_as_libbpf_and_pahole_do(kbuild_6_12, newest_pahole,
                                                           newest_libbpf, tmp_path):
    """The reference modules (veth, tun, dummy: more of vmlinux's types than
    the fixture's) linked again from their objects with distilled_base:
    libbpf's btf__distill_base on their plain split BTF gives the same
    .BTF.base and .BTF, byte for byte but for the header; and the newest
    pahole with distilled_base on the same .ko, both as the kernel loads
    them, the same content."""
    build = kbuild_6_12.build
    vmlinux = build / 'vmlinux'
    vmlinux_raw = sections(vmlinux)['.BTF'][0]
    base = parse_btf(vmlinux_raw)
    kos = [ko for ko in kbuild_6_12.modules() if ko.name in REFERENCE_MODULES]
    assert len(kos) == len(REFERENCE_MODULES)
    for ko in kos:
        ours = tmp_path / f'ours-{ko.name}'
        ld = first_command(ko)
        ld[ld.index('-o') + 1] = str(ours)
        run(*ld, cwd=build)
        run(objbtf_command(), 'link', '--quiet', '--btf-features', 'default,distilled_base',
            '--objects', ko.with_suffix('.mod').relative_to(build), '--base', 'vmlinux',
            ours, cwd=build)
        dist_raw, split_raw = newest_libbpf.distill(vmlinux_raw, sections(ko)['.BTF'][0])
        secs = sections(ours)
        assert blob_sections(secs['.BTF.base'][0]) == blob_sections(dist_raw), ko.name
        assert blob_sections(secs['.BTF'][0]) == blob_sections(split_raw), ko.name
        assert len(parse_btf(dist_raw)) >= 5, ko.name
        theirs = pahole_distilled(newest_pahole, ko, vmlinux, tmp_path / f'pahole-{ko.name}')
        loaded = [loaded_content(newest_libbpf, p, vmlinux_raw, base) for p in (theirs, ours)]
        assert unexplained(*loaded, objects=[ko.with_suffix('.o')]) == [], ko.name


def blob_sections(raw: bytes) -> tuple[bytes, bytes]:
    """The type and string sections of raw BTF."""
    h = BtfHeader.read(raw)
    return bytes(h.types(raw)), bytes(h.strings(raw))


@pytest.mark.kernel
def test_objbtf_stands_in_for_the_newest_pahole(kbuild_7_2, tmp_path):
    """7.2 with OBJBTF: no pahole need be installed (PAHOLE names none
    here), Kconfig and scripts/Makefile.btf see pahole 1.31, and the flags
    they choose reach objbtf link: its output has the kind layout and the
    arena attributes they ask for."""
    target = 'objbtf-print-pahole'
    r = run('make', '-s', '-C', kbuild_7_2.src, f'O={kbuild_7_2.build}',
            f'OBJBTF={objbtf_command()}', f'PAHOLE={tmp_path / "no-pahole"}',
            f'--eval={target}: ; @echo $(PAHOLE_VERSION) $(CONFIG_PAHOLE_VERSION) $(PAHOLE_FLAGS)',
            target)
    version, config, *flags = r.stdout.strip().splitlines()[-1].split()
    assert version == config == '131'
    assert '--btf_features=layout' in flags and '--btf_features=attributes' in flags
    btf = sections(kbuild_7_2.build / 'vmlinux')['.BTF'][0]
    assert BtfHeader.read(btf).layout_len
    assert "TYPE_TAG 'address_space(1)'" in run(need('bpftool'), 'btf', 'dump', 'file',
                                                kbuild_7_2.build / 'vmlinux').stdout
