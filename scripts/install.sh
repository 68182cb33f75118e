#!/usr/bin/env bash
# Installs what objbtf needs and what its tests use as oracles, on Debian 12,
# then objbtf itself: the wheel `python3 -m build` makes, with its test
# extras. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(gcc clang binutils dwarves bpftool libbpf1 python3-pip python3-venv python3-dev strace
      # the reference kernel and the Kbuild integration's end-to-end test
      linux-source-6.1 linux-source-6.12 patch make flex bison bc libssl-dev libelf-dev cpio xz-utils
      # clang builds (LLVM=1) and the cross-architecture tests (arm64, s390x)
      lld llvm gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu
      gcc-s390x-linux-gnu binutils-s390x-linux-gnu
      # the encode cache's test and benchmark with a compiler cache
      ccache
      # the C client's C library: the quickest static start (README)
      musl-tools
      # the newest pahole, built from vendor/ (scripts/build-pahole.sh)
      cmake pkg-config libdw-dev zlib1g-dev
      # the boot test: a built kernel in QEMU, a busybox initramfs, a libbpf loader
      qemu-system-x86 busybox-static libbpf-dev
      # make bindeb-pkg's packages (tests/test_kbuild_package.py)
      dpkg-dev debhelper fakeroot)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Linux 7.2's source, which Debian 12's suites lack: downloaded once from
# Debian's development suite (not installed; scripts/get-linux-source.sh).
scripts/get-linux-source.sh 7.2 >/dev/null
# objbtf as users install it: a wheel from `python -m build`, with the
# compiled modules, installed by pip with the tests' extras. Debian's own
# python3 refuses system-wide pip installs (PEP 668); other interpreters
# (pyenv, a venv) take the plain command.
pip_install() {
  python3 -m pip install -q "$@" 2>/dev/null || python3 -m pip install -q --break-system-packages "$@"
}
python3 -m build --version >/dev/null 2>&1 || pip_install build
rm -rf build dist                 # setuptools' build/ keeps files a moved module left
log=$(mktemp)
python3 -m build --wheel --outdir dist . >"$log" 2>&1 \
  || { cat "$log" >&2; echo "python3 -m build failed (its output above)" >&2; exit 1; }
rm -f "$log"
wheel=$(ls dist/objbtf-*.whl)
pip_install --no-deps --force-reinstall "$wheel"
pip_install "$wheel[test]"
# The tests import this checkout too: give it the wheel's compiled modules,
# as an editable install would have built them in place.
find objbtf linkdedup -name '*.so' -delete
python3 - "$wheel" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for name in wheel.namelist():
        if name.endswith('.so'):
            wheel.extract(name, '.')
PY
# objbtf-client holds the path of the interpreter it hands over to, so it
# is built here, for this one: in the installed package and in the checkout.
(cd / && python3 -m objbtf.resident.native_client >/dev/null)
python3 -m objbtf.resident.native_client >/dev/null
command -v objbtf >/dev/null || { echo "objbtf is not on PATH after install" >&2; exit 1; }
echo "objbtf installed: $(objbtf --version)"
