#!/usr/bin/env bash
# The per-object half of objbtf on a small multi-file C sample, no kernel needed:
# compile through the wrapper, look at each object's BTF and its relocations,
# let the linker place the variables, and check the result with the kernel's rules.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$(mktemp -d)}
mkdir -p "$out"
cd "$out"
CC=${CC:-gcc}

step() { printf '\n== %s\n' "$*"; }

step "compile with the wrapper: objbtf cc -- $CC -g -O2 -c"
for f in net disk; do
  objbtf cc -- "$CC" -g -O2 -c -o "$f.o" "$here/sample/$f.c"
  echo "$f.o: $(readelf -SW "$f.o" | grep -Eo '\.rela?\.BTF|\.BTF ' | tr -d ' ' | sort -u | xargs)"
done

step "each object's BTF (objbtf dump net.o)"
objbtf dump net.o

step "relocations that pin each variable to its symbol (readelf -r)"
for f in net disk; do readelf -rW "$f.o" | sed -n "/'.rela.BTF'/,/^$/p"; done

step "validate with the kernel's rules, and with the running kernel when root"
for f in net disk; do
  if [ "$(id -u)" = 0 ]; then objbtf check --kernel "$f.o"; else objbtf check "$f.o"; fi
done

step "link: ld concatenates .BTF and resolves every DATASEC offset to its symbol"
ld -o linked -e net_rx net.o disk.o
nm linked | grep -E ' (counter|net_stats|disk_hot)$' | sort
readelf -SW linked | grep -E ' \.BTF '

step "objbtf link: merge, relocate, rebuild DATASEC, check functions, dedup"
objbtf link --output final.btf linked
objbtf dump final.btf
if [ "$(id -u)" = 0 ]; then objbtf check --kernel final.btf; else objbtf check final.btf; fi
echo
echo "For a kernel build, see 'Kernel builds' in README.md. Files are in $out"
