"""The seccomp filter bubblewrap loads (`--seccomp FD`) just before it starts the sandboxed Python.

Every system call runs as usual except those in DENIED_SYSCALLS, which fail with EPERM: kernel
surfaces that untrusted code has no use for and that keep producing privilege-escalation bugs
(io_uring, eBPF, perf events, the kernel keyring, userfaultfd), ways to look at or steer other
processes (ptrace and the cross-process memory calls), and ways to change the filesystem view or
the kernel (mount and its newer API, kexec, module loading). A call from another architecture's
ABI (i386 `int 0x80`, x32) kills the process: libseccomp's default for a foreign architecture,
which closes the classic way around a filter written for the native syscall numbers.

The BPF program is compiled by libseccomp (its Python bindings: `seccomp`, shipped with
libseccomp as python3-seccomp, or the ctypes binding `pyseccomp` from pip), never assembled by
hand. `seccomp_program()` returns it as bytes, built once per process.
"""

from __future__ import annotations

import errno
import functools
import os

# name -> why it is denied. Names the running kernel or libseccomp does not know are skipped.
DENIED_SYSCALLS: dict[str, str] = {
    "io_uring_setup": "io_uring: a second syscall interface, a steady source of kernel exploits",
    "io_uring_enter": "io_uring",
    "io_uring_register": "io_uring",
    "bpf": "eBPF programs and maps",
    "perf_event_open": "performance counters: side channels and kernel bugs",
    "keyctl": "the kernel keyring",
    "add_key": "the kernel keyring",
    "request_key": "the kernel keyring",
    "open_by_handle_at": "opens files by handle, around the mount namespace (the Docker 'shocker' escape)",
    "name_to_handle_at": "the other half of open_by_handle_at",
    "userfaultfd": "holds kernel threads at a page fault: widens kernel race windows",
    "ptrace": "tracing or steering any process",
    "process_vm_readv": "reads another process's memory",
    "process_vm_writev": "writes another process's memory",
    "kexec_load": "replaces the running kernel",
    "kexec_file_load": "replaces the running kernel",
    "init_module": "loads a kernel module",
    "finit_module": "loads a kernel module",
    "delete_module": "unloads a kernel module",
    "mount": "changes the filesystem view",
    "umount2": "changes the filesystem view",
    "pivot_root": "changes the filesystem view",
    "chroot": "changes the filesystem view",
    "move_mount": "the new mount API",
    "open_tree": "the new mount API",
    "fsopen": "the new mount API",
    "fsconfig": "the new mount API",
    "fsmount": "the new mount API",
    "fspick": "the new mount API",
    "mount_setattr": "the new mount API",
    "unshare": "new namespaces: the kernel code reachable from a fresh user namespace",
    "setns": "joining other namespaces",
}


class SeccompUnavailable(RuntimeError):
    """libseccomp or its Python bindings are missing; the message says how to install them."""


def _bindings():
    try:
        import seccomp  # the bindings shipped with libseccomp (apt python3-seccomp)

        return seccomp
    except ImportError:
        pass
    try:
        import pyseccomp  # ctypes bindings with the same API (pip install pyseccomp)

        return pyseccomp
    except (ImportError, OSError) as e:  # OSError: the bindings load, libseccomp.so.2 does not
        raise SeccompUnavailable(
            f"no libseccomp bindings ({e}): install libseccomp (`apt-get install libseccomp2`, "
            "`dnf install libseccomp`) and `pip install pyseccomp`"
        ) from None


def denied_syscall_numbers() -> dict[str, int]:
    """{name: number} on this machine's native architecture, for the names libseccomp knows."""
    sc = _bindings()
    arch = sc.system_arch()
    numbers = {}
    for name in DENIED_SYSCALLS:
        try:
            nr = sc.resolve_syscall(arch, name)
        except (ValueError, OSError):
            continue
        if nr >= 0:
            numbers[name] = nr
    return numbers


@functools.lru_cache(maxsize=1)
def seccomp_program() -> bytes:
    """The compiled BPF filter: default allow, EPERM for DENIED_SYSCALLS, kill on a foreign ABI."""
    sc = _bindings()
    f = sc.SyscallFilter(sc.ALLOW)
    for name in denied_syscall_numbers():
        f.add_rule(sc.ERRNO(errno.EPERM), name)
    fd = os.memfd_create("relay-seccomp", 0)
    try:
        with os.fdopen(fd, "w+b", closefd=False) as out:
            f.export_bpf(out)
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    program = b"".join(chunks)
    if not program or len(program) % 8:  # struct sock_filter is 8 bytes
        raise SeccompUnavailable(f"libseccomp exported a {len(program)}-byte filter, not a BPF program")
    return program
