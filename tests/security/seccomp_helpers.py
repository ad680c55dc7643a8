"""A seccomp filter that makes one system call fail, for tests that need a kernel or a
container that refuses it (no namespaces, no Landlock) on a machine that allows it."""

from __future__ import annotations

# The audit architecture each machine's filter checks before it looks at the call.
MACHINES = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

_FILTER = """
import ctypes, os, sys
ARCH = {machines}[os.uname().machine]
NR = {numbers}[os.uname().machine]
class F(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]
class P(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(F))]
code = [(0x20, 0, 0, 4), (0x15, 0, 3, ARCH), (0x20, 0, 0, 0), (0x15, 0, 1, NR),
        (0x06, 0, 0, 0x00050000 | {errno}), (0x06, 0, 0, 0x7FFF0000)]
prog = P(len(code), (F * len(code))(*(F(*c) for c in code)))
libc = ctypes.CDLL(None, use_errno=True)
u = ctypes.c_ulong
assert libc.prctl(u(38), u(1), u(0), u(0), u(0)) == 0
assert libc.prctl(u(22), u(2), u(ctypes.addressof(prog)), u(0), u(0)) == 0
"""


def refusing(numbers: dict[str, int], errno: int, then: str) -> str:
    """Python source for ``python -c``: a filter that answers the system call numbered
    ``numbers[machine]`` with ``errno`` (the rest allowed, no privilege needed), then ``then``.
    """
    return _FILTER.format(machines=MACHINES, numbers=numbers, errno=errno) + then
