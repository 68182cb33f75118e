#!/usr/bin/env bash
# Builds pahole from a dwarves source tarball whose lib/bpf holds libbpf (such
# as vendor/dwarves-*.tar.xz) and installs it into PREFIX, leaving the
# distribution's pahole alone. The tests and benchmarks use it as the newest
# pahole, the kernel's own BTF encoder that objbtf is compared with.
#
#   scripts/build-pahole.sh TARBALL PREFIX
#
# Needs cmake, gcc, make, libdw-dev, libelf-dev and zlib1g-dev (scripts/install.sh
# installs them); fetches nothing. The binaries carry RUNPATH=PREFIX/lib, so
# PREFIX/bin/pahole runs without LD_LIBRARY_PATH (its libdwarves.so.1 shares
# the distribution's soname). Quiet unless a step fails; JOBS (default: the
# CPUs) sets make's parallelism.
set -euo pipefail
usage="usage: build-pahole.sh TARBALL PREFIX"
(($# == 2)) || { echo "$usage" >&2; exit 2; }
tarball=$1 prefix=$2
[[ -f $tarball && -r $tarball ]] || { echo "build-pahole.sh: cannot read the tarball $tarball" >&2; exit 1; }
for tool in cmake make gcc; do
	command -v "$tool" >/dev/null || { echo "build-pahole.sh: $tool is missing (scripts/install.sh installs it)" >&2; exit 1; }
done
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$work/log
quietly() {
	"$@" >>"$log" 2>&1 || { cat "$log" >&2; echo "build-pahole.sh: failed: $*" >&2; exit 1; }
}
mkdir "$work/src" "$work/build"
quietly tar -C "$work/src" --strip-components=1 -xf "$tarball"
[[ -f $work/src/lib/bpf/src/btf.c ]] ||
	{ echo "build-pahole.sh: $tarball has no libbpf in lib/bpf" >&2; exit 1; }
quietly cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLIBBPF_EMBEDDED=ON \
	-DCMAKE_INSTALL_PREFIX="$prefix" -D__LIB=lib -DCMAKE_INSTALL_LIBDIR=lib \
	-DCMAKE_INSTALL_RPATH="$prefix/lib"
quietly make -C "$work/build" -j"${JOBS:-$(nproc)}"
quietly make -C "$work/build" install
"$prefix/bin/pahole" --version >/dev/null ||
	{ echo "build-pahole.sh: the installed $prefix/bin/pahole does not run" >&2; exit 1; }
