"""A built x86_64 kernel booted in QEMU from a small initramfs, for the
checks only a running kernel can make (tests/test_boot.py).

The guest is busybox (busybox-static), the distribution's bpftool, and the
boot test's own loader (tests/fixtures/boot), with the shared libraries
each needs copied from the host; its /init (``INIT``) checks what it can and
says so on the serial console, one ``OBJBTF KEY VALUE...`` line each, then
reboots, which ends QEMU (``-no-reboot``).  QEMU runs its TCG emulation:
KVM on these machines is nested and aborts.  vmlinux boots as it is,
through its PVH entry point (tests/fixtures/kconfig/boot.config).
"""
from __future__ import annotations

import os
import re
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: The guest's /init: mounts, then the checks, then the kernel's log, then reboot.
INIT = r'''#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mkdir -p /proc /sys /dev /tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t bpf bpf /sys/fs/bpf
mount -t debugfs debugfs /sys/kernel/debug
say() { echo "OBJBTF $*"; }
say release "$(uname -r)"
if [ -r /sys/kernel/btf/vmlinux ]; then
	say vmlinux-btf "$(md5sum < /sys/kernel/btf/vmlinux | cut -d' ' -f1)"
fi
if bpftool btf dump file /sys/kernel/btf/vmlinux >/tmp/types 2>/tmp/err; then
	say bpftool-types "$(grep -c '^\[' /tmp/types)"
else
	say bpftool-failed; cat /tmp/err
fi
pending="$(ls /modules)"
while [ -n "$pending" ]; do
	left= progress=
	for ko in $pending; do
		if insmod "/modules/$ko" 2>/dev/null; then progress=1; else left="$left $ko"; fi
	done
	pending=$left
	[ -n "$progress" ] || break
done
for ko in $pending; do say module-failed "$ko"; insmod "/modules/$ko"; done
for name in $(cut -d' ' -f1 /proc/modules); do
	if [ -r "/sys/kernel/btf/$name" ]; then say module-btf "$name"
	else say module-no-btf "$name"; fi
done
/bin/loader /core_fentry.bpf.o
say loader-exit $?
say dmesg-begin
dmesg
say dmesg-end
reboot -f
'''


@dataclass
class Guest:
    """What a boot printed on the serial console."""
    console: str

    def said(self, key: str) -> list[str]:
        """The values of the guest's ``OBJBTF KEY VALUE`` lines for ``key``
        (the first may follow the firmware's output on its line)."""
        said = re.compile(rf'OBJBTF {re.escape(key)}(?: (.*))?$')
        return [m[1] or '' for line in self.console.splitlines()
                if (m := said.search(line.rstrip('\r')))]

    def kernel_log(self) -> list[str]:
        """The guest's dmesg, as it printed it at the end."""
        text = self.console.split('OBJBTF dmesg-begin', 1)[-1].split('OBJBTF dmesg-end', 1)[0]
        return [line.strip() for line in text.splitlines() if line.strip()]


def _newc(name: str, mode: int, data: bytes, ino: int) -> bytes:
    """One cpio "newc" entry, the format the kernel unpacks an initramfs from."""
    fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name) + 1, 0)
    head = b'070701' + b''.join(b'%08X' % f for f in fields) + name.encode() + b'\0'
    head += b'\0' * (-len(head) % 4)
    return head + data + b'\0' * (-len(data) % 4)


def write_initramfs(out: Path, files: dict[str, Path | bytes]) -> Path:
    """An uncompressed initramfs at ``out``: each guest path with the host
    file's bytes (or the bytes given), executables keeping their mode, and
    the directories they are in."""
    dirs = sorted({str(Path(p).parent).lstrip('/') for p in files} - {''})
    every = sorted({d for p in dirs for d in
                    ('/'.join(p.split('/')[:i + 1]) for i in range(p.count('/') + 1))})
    chunks, ino = [], 1
    for d in every:
        chunks.append(_newc(d, stat.S_IFDIR | 0o755, b'', ino))
        ino += 1
    for path, content in sorted(files.items()):
        if isinstance(content, Path):
            data = content.read_bytes()
            mode = 0o755 if os.access(content, os.X_OK) else 0o644
        else:
            data, mode = content, 0o755 if path == '/init' else 0o644
        chunks.append(_newc(path.lstrip('/'), stat.S_IFREG | mode, data, ino))
        ino += 1
    chunks.append(_newc('TRAILER!!!', 0, b'', 0))
    out.write_bytes(b''.join(chunks))
    return out


def with_libraries(binary: Path) -> dict[str, Path]:
    """``binary`` at its own path and the shared libraries ``ldd`` says it
    loads, each at the path the dynamic linker looks for it."""
    files = {str(binary): binary.resolve()}
    out = subprocess.run(['ldd', str(binary)], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        path = parts[2] if '=>' in parts and len(parts) > 2 else parts[0]
        if path.startswith('/'):
            files[path] = Path(path).resolve()
    return files


def boot(vmlinux: Path, initramfs: Path, timeout: float = 600) -> Guest:
    """Boots ``vmlinux`` with ``initramfs`` in QEMU and returns what the guest
    printed once it rebooted (a panic reboots too: panic=-1)."""
    cmd = ['qemu-system-x86_64', '-accel', 'tcg', '-m', '512M', '-smp', '1', '-nographic',
           '-no-reboot', '-kernel', str(vmlinux), '-initrd', str(initramfs),
           '-append', 'console=ttyS0 panic=-1 oops=panic loglevel=4']
    r = subprocess.run(cmd, capture_output=True, text=True, errors='replace', timeout=timeout,
                       stdin=subprocess.DEVNULL)
    return Guest(r.stdout + r.stderr)
