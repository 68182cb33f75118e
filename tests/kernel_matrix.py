"""The kernel builds the tests run: one table, and the tiers that choose from it.

Each row is one real ``make OBJBTF=... vmlinux modules`` of a patched Linux
tree (kbuild_tree.py), made at most once per run by the session fixture
named in ``fixture`` (conftest.py makes one per row).  A test that needs a
build asks for its fixture, directly or through a fixture parametrized with
fixture names; conftest.py reads that off each collected test, marks it
``kernel``, and keeps it only when every build it needs is in the run's tier:

- ``default``: what ``python3 -m pytest -q`` builds: the newest supported
  Linux with gcc, bootable, which also serves the reference-kernel tests
  (REFERENCE: its objects keep their DWARF);
- ``ci``: ``--tier ci``, what CI runs: one build per axis, each supported
  kernel version and the DWARF-less mode (on the newest version), plus one
  of the ``ROTATION`` (clang, cross architectures) chosen from the commit;
- ``full``: ``--tier full``, every row.

``--build FIXTURE`` adds a row to any tier; ``--keep-builds=DIR`` makes the
builds in DIR and reuses them in later runs (for working on the tests).
Adding a kernel version or an architecture is a row here plus its patch set
under kbuild-integration/.
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

TIERS = ('default', 'ci', 'full')
#: The Linux versions kbuild-integration supports (a linux-VERSION/ patch set each).
VERSIONS = ('6.1', '6.12', '7.2')

#: Make arguments of each architecture built with a cross compiler.
CROSS = {'arm64': ('ARCH=arm64', 'CROSS_COMPILE=aarch64-linux-gnu-'),
         's390x': ('ARCH=s390', 'CROSS_COMPILE=s390x-linux-gnu-')}
#: The tools each toolchain and cross architecture needs beyond gcc and make.
TOOLS = {'clang': ('clang', 'ld.lld', 'llvm-objcopy', 'llvm-nm', 'llvm-ar'),
         'arm64': ('aarch64-linux-gnu-gcc', 'aarch64-linux-gnu-ld'),
         's390x': ('s390x-linux-gnu-gcc', 's390x-linux-gnu-ld')}


#: kbuild-integration/configure's default fragment.
REFERENCE_CONFIG = 'reference.config'
#: The reference config and what the boot test needs (tests/test_boot.py).
BOOTABLE = (REFERENCE_CONFIG, 'boot.config')
BOOT_FRAGMENT = 'boot.config'
#: What BOOT_FRAGMENT is there for, checked in each such build's .config.
BOOT_CONFIG = ('CONFIG_FUNCTION_TRACER=y', 'CONFIG_BPF_EVENTS=y')


@dataclass(frozen=True)
class Build:
    """One kernel build of the matrix."""
    fixture: str                 # conftest's session fixture that makes it
    version: str                 # Linux version: kbuild-integration/linux-VERSION
    tier: str                    # TIERS, or 'rotation' (ci takes one of ROTATION)
    toolchain: str = 'gcc'       # 'gcc' or 'clang' (LLVM=1)
    arch: str = 'x86_64'
    mode: str = 'dwarf'          # 'dwarf', or 'gbtf': DWARF-less (OBJBTF_GBTF=1)
    #: Config fragments on top of tinyconfig, in order: tests/fixtures/kconfig's,
    #: or kbuild-integration/configs' (REFERENCE_CONFIG: the reference config).
    fragments: tuple[str, ...] = ()
    #: Lines the resulting .config must have (the fragments' point).
    expect_config: tuple[str, ...] = ()
    #: Builds this one's tests compare it with (a DWARF-less build's DWARF twin).
    needs: tuple[str, ...] = ()

    @property
    def bootable(self) -> bool:
        """Whether the boot test boots this build in QEMU."""
        return BOOT_FRAGMENT in self.fragments and self.arch == 'x86_64'

    def make_args(self) -> tuple[str, ...]:
        """What every make of this build takes, configure's too, but the
        DWARF-less switch (kbuild_tree.build_args adds it, with the quick client)."""
        args = CROSS.get(self.arch, ())
        return args + (('LLVM=1',) if self.toolchain == 'clang' else ())

    def targets(self) -> tuple[str, ...]:
        """What the build makes: vmlinux and the modules, and on x86 the
        compressed image too, whose boot decompressor links kernel objects
        (libraries) outside vmlinux."""
        return ('vmlinux', 'modules') + (('bzImage',) if self.arch in ('x86_64', 'i386') else ())

    def tools(self) -> tuple[str, ...]:
        return TOOLS.get(self.toolchain, ()) + TOOLS.get(self.arch, ())

    def describe(self) -> str:
        config = '+'.join(Path(f).stem for f in self.fragments)
        return f'{self.version} {self.toolchain} {self.arch} {self.mode} ({config} config)'


#: Every build, in the order a run makes them: the builds of one source
#: version together, so that its patched copy is deleted once they are done,
#: and each build right before those that need it.
MATRIX = (
    Build('kbuild_6_1', '6.1', 'ci', fragments=BOOTABLE, expect_config=BOOT_CONFIG),
    Build('kbuild_6_1_gbtf', '6.1', 'full', mode='gbtf', fragments=BOOTABLE,
          expect_config=BOOT_CONFIG,
          needs=('kbuild_6_1',)),
    Build('kbuild_6_1_gbtf_kallsyms', '6.1', 'full', mode='gbtf',
          fragments=('small.config', 'x86_64.config'), expect_config=('CONFIG_KALLSYMS=y',)),
    Build('kbuild_6_1_llvm', '6.1', 'rotation', toolchain='clang', fragments=BOOTABLE,
          expect_config=BOOT_CONFIG),
    Build('kbuild_6_1_arm64', '6.1', 'rotation', arch='arm64', fragments=('small.config',),
          expect_config=('CONFIG_KALLSYMS=y',)),
    Build('kbuild_6_1_i386', '6.1', 'rotation', arch='i386',
          fragments=('small.config', 'i386.config'),
          expect_config=('CONFIG_X86_32=y', 'CONFIG_SMP=y')),
    Build('kbuild_6_1_s390x', '6.1', 'full', arch='s390x', fragments=('small.config',)),
    Build('kbuild_6_1_lto', '6.1', 'full', toolchain='clang', fragments=('lto-small.config',),
          expect_config=('CONFIG_LTO_CLANG_THIN=y',)),
    Build('kbuild_6_12', '6.12', 'ci', fragments=BOOTABLE, expect_config=BOOT_CONFIG),
    Build('kbuild_6_12_gbtf', '6.12', 'full', mode='gbtf', fragments=BOOTABLE,
          expect_config=BOOT_CONFIG,
          needs=('kbuild_6_12',)),
    Build('kbuild_6_12_llvm', '6.12', 'rotation', toolchain='clang', fragments=BOOTABLE,
          expect_config=BOOT_CONFIG),
    Build('kbuild_7_2', '7.2', 'default', fragments=BOOTABLE, expect_config=BOOT_CONFIG),
    Build('kbuild_7_2_gbtf', '7.2', 'ci', mode='gbtf', fragments=BOOTABLE,
          expect_config=BOOT_CONFIG, needs=('kbuild_7_2',)),
)
BY_FIXTURE = {b.fixture: b for b in MATRIX}
#: The slow-changing axes CI takes turns on, one a run: clang, a cross
#: architecture, clang on the other version, 32-bit x86.
ROTATION = ('kbuild_6_12_llvm', 'kbuild_6_1_arm64', 'kbuild_6_1_llvm', 'kbuild_6_1_i386')
#: The builds whose relink tests (marked ``relinks``: a touched file, a new
#: type, a failed link, other link flags) run short of the full matrix: the
#: oldest and the newest version's patch sets; 6.12's, whose relink rules are
#: 6.1's, only in the full matrix.
RELINKED = ('kbuild_6_1', 'kbuild_7_2')
#: The build the reference-kernel tests run on: the default tier's.
REFERENCE = 'kbuild_7_2'


def rotation_turn(root: Path) -> tuple[str, str]:
    """(the ROTATION build this checkout's commit picks, the commit): the
    commit id taken as a number, modulo the rotation's length; 'no commit'
    (and the first) outside a git checkout."""
    r = subprocess.run(['git', '-C', str(root), 'rev-parse', 'HEAD'], capture_output=True,
                       text=True)
    commit = r.stdout.strip() if r.returncode == 0 else ''
    if not commit:
        return ROTATION[0], 'no commit'
    return ROTATION[int(commit, 16) % len(ROTATION)], commit[:12]


def builds_of_tier(tier: str, turn: str) -> set[str]:
    """The fixtures of the builds a run of ``tier`` makes, ``turn`` the
    ROTATION build whose turn it is (``rotation_turn``)."""
    rank = TIERS.index(tier)
    chosen = {b.fixture for b in MATRIX
              if b.tier != 'rotation' and TIERS.index(b.tier) <= rank}
    if tier == 'full':
        chosen |= set(ROTATION)
    elif tier == 'ci':
        chosen.add(turn)
    return chosen


def with_needs(fixtures: set[str]) -> set[str]:
    """``fixtures`` and every build they need, transitively."""
    out, todo = set(), list(fixtures)
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo.extend(BY_FIXTURE[name].needs)
    return out
