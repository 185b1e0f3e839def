#!/usr/bin/env python3
"""corral as a preexec hook: an existing Python supervisor keeps its own
subprocess.Popen and adds corral's mechanisms between fork and exec.

What it shows: the C ABI through ctypes. The child gets RLIMIT_NOFILE
capped at 64 and may write only inside one work directory (Landlock);
reading and executing elsewhere still work.

Run:  python3 examples/python_preexec.py            (finds libcorral.so.0 on the
      loader path; set CORRAL_LIB=build/lib/libcorral.so to use a build tree)

Everything the hook needs (arrays, encoded paths) is built BEFORE fork:
the preexec function only calls into corral, whose apply functions are
async-signal-safe (raw system calls, no allocation).
"""
import ctypes
import os
import resource
import subprocess
import sys
import tempfile

lib = ctypes.CDLL(os.environ.get("CORRAL_LIB", "libcorral.so.0"), use_errno=True)


class Rlimit(ctypes.Structure):
    _fields_ = [("resource", ctypes.c_int), ("soft", ctypes.c_uint64), ("hard", ctypes.c_uint64)]


lib.corral_apply_rlimits.argtypes = [ctypes.POINTER(Rlimit), ctypes.c_size_t]
lib.corral_confine_writes.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t]
lib.corral_landlock_abi.argtypes = []


def make_preexec(workdir: str):
    limits = (Rlimit * 1)(Rlimit(resource.RLIMIT_NOFILE, 64, 64))
    paths = (ctypes.c_char_p * 1)(workdir.encode())

    def preexec():
        # A failure here must not exec an unconfined child: exit instead.
        if lib.corral_apply_rlimits(limits, 1) != 0:
            os._exit(120)
        if lib.corral_confine_writes(paths, 1) != 0:
            os._exit(121)

    return preexec


def main() -> int:
    print(f"landlock ABI {lib.corral_landlock_abi()}", flush=True)
    with tempfile.TemporaryDirectory() as work, tempfile.TemporaryDirectory() as elsewhere:
        script = (
            'grep "Max open files" /proc/self/limits; '
            'echo ok > "$WORK/inside" && echo "write inside: ok"; '
            'if echo no > "$ELSEWHERE/outside" 2>/dev/null; then echo "write outside: ALLOWED"; '
            'else echo "write outside: refused"; fi'
        )
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "WORK": work, "ELSEWHERE": elsewhere}
        proc = subprocess.run(["sh", "-c", script], env=env, preexec_fn=make_preexec(work),
                              capture_output=True, text=True)
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        if proc.returncode != 0:
            print(f"child exited {proc.returncode}", file=sys.stderr)
            return 1
        return 0 if "write outside: refused" in proc.stdout else 1


if __name__ == "__main__":
    sys.exit(main())
