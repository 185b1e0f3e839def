"""corral.preexec: the C ABI's apply halves as a subprocess preexec_fn.

Everything that allocates, parses or can fail with a good message happens
when the hook is built, in the parent (DESIGN: prepare in the parent, apply
in the child): limit names become an array of struct corral_rlimit, paths
are checked and encoded, the seccomp filter is compiled by libseccomp. The
hook itself only calls corral's async-signal-safe apply functions in order:

    rlimits -> subreaper -> confine_writes (Landlock) -> drop_to (uid, gid)
            -> drop_capabilities (+ no_new_privs) -> seccomp

Landlock comes before the uid change so the paths are opened with the
caller's rights; capabilities go after it (setresuid needs CAP_SETUID);
seccomp is last so the filter does not see corral's own setup calls.

A failed step writes "corral: preexec STEP: REASON" to the child's stderr
and raises PreexecError there: subprocess then never execs the program and
raises SubprocessError in the parent.
"""
from __future__ import annotations

import ctypes
import os
import resource
from typing import Dict, Iterable, Mapping, Optional, Sequence, Tuple, Union

from ._errors import CorralError, PreexecError
from ._lib import _Rlimit, library

RLIM_INFINITY = resource.RLIM_INFINITY & 0xFFFFFFFFFFFFFFFF

# corral's names for the rlimits (DESIGN: pyplaypen's), and what each is.
RLIMIT_NAMES: Dict[str, int] = {
    "cpu_seconds": resource.RLIMIT_CPU,       # SIGXCPU at the soft limit
    "memory_bytes": resource.RLIMIT_AS,       # address space, as in corral's process tiers
    "process_count": resource.RLIMIT_NPROC,   # per uid: binds per run only with drop_to
    "file_bytes": resource.RLIMIT_FSIZE,      # SIGXFSZ past it
    "open_files": resource.RLIMIT_NOFILE,
    "core_bytes": resource.RLIMIT_CORE,
    "stack_bytes": resource.RLIMIT_STACK,
}

LimitValue = Union[int, None, Tuple[Optional[int], Optional[int]]]


def _rlim(value: Optional[int], name: str) -> int:
    if value is None:
        return RLIM_INFINITY
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"rlimit {name}: {value!r} is not an integer (or None for no limit)")
    if value < 0:
        raise ValueError(f"rlimit {name}: {value} is negative")
    return value


class Preexec:
    """A preexec_fn built once, callable in the child. See corral.preexec."""

    def __init__(self, rlimits: Optional[Mapping[Union[str, int], LimitValue]] = None,
                 confine_writes: Optional[Iterable[Union[str, os.PathLike]]] = None,
                 seccomp: Union[None, str, Sequence[str]] = None,
                 drop_to: Union[None, int, Tuple[int, int]] = None,
                 drop_capabilities: bool = True, subreaper: bool = False, core_dumps: bool = False):
        self._lib = library()
        self._seccomp = None
        self.steps = []  # what the hook does, in order, for a reader (and repr)

        limits = []
        given = set()
        for key, value in (rlimits or {}).items():
            if isinstance(key, str):
                if key not in RLIMIT_NAMES:
                    raise ValueError(f"rlimit {key!r} is not one of {', '.join(RLIMIT_NAMES)} "
                                     "(or a resource.RLIMIT_* number)")
                res, name = RLIMIT_NAMES[key], key
            else:
                res, name = int(key), f"resource {key}"
            soft, hard = value if isinstance(value, tuple) else (value, value)
            soft, hard = _rlim(soft, name), _rlim(hard, name)
            if soft > hard:
                raise ValueError(f"rlimit {name}: soft {soft} is above hard {hard}")
            limits.append((res, soft, hard))
            given.add(res)
        if not core_dumps and resource.RLIMIT_CORE not in given:
            limits.append((resource.RLIMIT_CORE, 0, 0))
        self._limits = (_Rlimit * len(limits))(*[_Rlimit(r, s, h) for r, s, h in limits])
        self._nlimits = len(limits)
        if limits:
            names = {v: k for k, v in RLIMIT_NAMES.items()}
            shown = lambda v: "unlimited" if v == RLIM_INFINITY else str(v)
            self.steps.append("rlimits " + ", ".join(
                f"{names.get(r, r)}={shown(s)}" + ("" if s == h else f"/{shown(h)}") for r, s, h in limits))

        self._subreaper = subreaper
        if subreaper:
            self.steps.append("subreaper")

        self._paths = None
        if confine_writes is not None:
            paths = [os.fsencode(os.fspath(p)) for p in confine_writes]
            # As corral's process tier does: a program that cannot open
            # /dev/null for writing breaks on `2>/dev/null`.
            if b"/dev/null" not in paths:
                paths.append(b"/dev/null")
            for p in paths:
                if not os.path.exists(p):
                    raise PreexecError("confine_writes", 2, os.fsdecode(p))
            if self._lib.corral_landlock_abi() < 1:
                raise PreexecError("confine_writes", 95, "this kernel has no Landlock")
            self._paths = (ctypes.c_char_p * len(paths))(*paths)
            self._npaths = len(paths)
            self.steps.append("confine_writes " + " ".join(os.fsdecode(p) for p in paths))

        self._uid = self._gid = None
        if drop_to is not None:
            uid, gid = drop_to if isinstance(drop_to, tuple) else (drop_to, drop_to)
            if uid <= 0 or gid <= 0:
                raise ValueError(f"drop_to: uid {uid} / gid {gid}: a drop to root is none (needs > 0)")
            self._uid, self._gid = int(uid), int(gid)
            self.steps.append(f"drop_to {uid}:{gid}")

        self._caps = drop_capabilities
        if drop_capabilities:
            self.steps.append("drop_capabilities")

        if seccomp:
            profile = seccomp if isinstance(seccomp, str) else ",".join(seccomp)
            out = ctypes.c_void_p()
            rc = self._lib.corral_seccomp_prepare(profile.encode(), ctypes.byref(out))
            if rc != 0:
                raise PreexecError("seccomp", -rc, f"profile {profile!r}")
            self._seccomp = out
            self.steps.append(f"seccomp {profile}")

    def __repr__(self) -> str:
        return "corral.Preexec(" + "; ".join(self.steps) + ")"

    def close(self) -> None:
        """Frees the prepared seccomp filter (also done when collected)."""
        if self._seccomp is not None and self._seccomp.value:
            self._lib.corral_seccomp_free(self._seccomp)
        self._seccomp = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @staticmethod
    def _fail(step: str, rc: int):
        err = -rc
        os.write(2, f"corral: preexec {step}: {os.strerror(err)}\n".encode())
        raise PreexecError(step, err)

    def __call__(self) -> None:
        """Runs in the child, between fork and exec."""
        lib = self._lib
        if self._nlimits:
            rc = lib.corral_apply_rlimits(self._limits, self._nlimits)
            if rc:
                self._fail("rlimits", rc)
        if self._subreaper:
            rc = lib.corral_become_subreaper()
            if rc:
                self._fail("subreaper", rc)
        if self._paths is not None:
            rc = lib.corral_confine_writes(self._paths, self._npaths)
            if rc:
                self._fail("confine_writes", rc)
        if self._uid is not None:
            rc = lib.corral_drop_privileges(self._uid, self._gid)
            if rc:
                self._fail("drop_to", rc)
        if self._caps:
            rc = lib.corral_drop_capabilities()
            if rc:
                self._fail("drop_capabilities", rc)
        if self._seccomp is not None:
            rc = lib.corral_seccomp_apply(self._seccomp)
            if rc:
                self._fail("seccomp", rc)


def preexec(rlimits=None, confine_writes=None, seccomp=None, drop_to=None, *, drop_capabilities=True,
            subreaper=False, core_dumps=False) -> Preexec:
    """A preexec_fn for subprocess.Popen/run, prepared now, applied in the child.

    rlimits: {name or resource.RLIMIT_*: value or (soft, hard)}; names are
      corral's (cpu_seconds, memory_bytes, process_count, file_bytes,
      open_files, core_bytes, stack_bytes); None is no limit. Core dumps are
      off unless core_dumps=True or core_bytes is given.
    confine_writes: paths the program may write beneath (Landlock); reading
      and executing stay allowed everywhere; /dev/null is always added (as
      corral's process tier does). [] allows no other write; None (default)
      leaves writes alone. Refused now when a path does not exist
      or the kernel has no Landlock.
    seccomp: "default", "no-network" or both ("default,no-network" or a list).
    drop_to: (uid, gid) or uid (gid = uid): setgroups(0), setresgid,
      setresuid, verified; needs root; 0 is refused.
    drop_capabilities: clear every capability and set no_new_privs (default).
    subreaper: make the child a subreaper of its own descendants.
    """
    return Preexec(rlimits=rlimits, confine_writes=confine_writes, seccomp=seccomp, drop_to=drop_to,
                   drop_capabilities=drop_capabilities, subreaper=subreaper, core_dumps=core_dumps)


__all__ = ["preexec", "Preexec", "RLIMIT_NAMES", "CorralError"]
