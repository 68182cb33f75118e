#!/usr/bin/env bash
# Builds the stock reference kernel the benchmarks measure objbtf against
# (the tests build theirs through the integration: tests/kernel_matrix.py):
# Linux from Debian's linux-source-VERSION package, tinyconfig plus
# kbuild-integration/configs/reference.config (DWARF 5, BTF via pahole, a few
# modules), x86_64, gcc. About 8-10 minutes on 2 cores; a second run that
# finds a finished build returns at once.
#
#   build-kernel.sh [--source 6.1|6.12|7.2] [--modules] [DIR]
#
#   --source   which linux-source-X package (default 6.1; 7.2 comes from Debian's
#              development suite, see get-linux-source.sh)
#   --modules  also apply kbuild-integration/configs/modules.config (about 120
#              more small modules)
#   DIR        defaults to $OBJBTF_KERNEL_DIR or /var/cache/objbtf/kernel-6.1;
#              with --source or --modules, /var/cache/objbtf/kernel-VERSION[-modules]
#
# Leaves DIR/linux (source, pristine), DIR/build (O= tree with vmlinux, the
# objects, vmlinux.a, modules) and DIR/READY (written last). Prints DIR/build.
# Use KBUILD_EXTRA="..." to pass more make arguments (e.g. V=1, LLVM=1).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
configs=$here/../kbuild-integration/configs
version=6.1 modules=0
while [[ ${1:-} == --* ]]; do
  case $1 in
    --source) version=$2; shift 2;;
    --modules) modules=1; shift;;
    *) echo "unknown option $1" >&2; exit 2;;
  esac
done
default=/var/cache/objbtf/kernel-$version
if [[ $modules == 1 ]]; then default=$default-modules
elif [[ $version == 6.1 ]]; then default=${OBJBTF_KERNEL_DIR:-$default}
fi
dir=${1:-$default}
if [[ -f $dir/READY ]]; then echo "$dir/build"; exit 0; fi

need=()
for p in dwarves bpftool libelf-dev flex bison bc libssl-dev cpio gcc make xz-utils; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
  echo "installing: ${need[*]}" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
fi

mkdir -p "$dir"
if [[ ! -d $dir/linux ]]; then
  tar -C "$dir" -xf "$("$here/get-linux-source.sh" "$version")"
  mv "$dir/linux-source-$version" "$dir/linux"
fi
b=$dir/build
mkdir -p "$b"
make -s -C "$dir/linux" O="$b" ${KBUILD_EXTRA:-} tinyconfig >&2
fragments=("$configs/reference.config")
[[ $modules == 1 ]] && fragments+=("$configs/modules.config")
args=()
for f in "${fragments[@]}"; do
  while IFS='=' read -r name val; do
    [[ -z $name || $name == \#* ]] && continue
    case $val in y) args+=(-e "$name");; m) args+=(-m "$name");; n) args+=(-d "$name");; esac
  done < "$f"
done
"$dir/linux/scripts/config" --file "$b/.config" "${args[@]}"
make -s -C "$dir/linux" O="$b" ${KBUILD_EXTRA:-} olddefconfig >&2
grep -q '^CONFIG_DEBUG_INFO_BTF=y' "$b/.config" || { echo "CONFIG_DEBUG_INFO_BTF did not survive olddefconfig" >&2; exit 1; }
make -C "$dir/linux" O="$b" -j"$(nproc)" ${KBUILD_EXTRA:-} vmlinux modules >&2
touch "$dir/READY"
echo "$b"
