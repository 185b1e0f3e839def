#!/usr/bin/env python3
"""corral as a preexec hook: an existing Python supervisor keeps its own
subprocess.Popen and adds corral's mechanisms between fork and exec.

The child gets RLIMIT_NOFILE capped at 64, core dumps off, no capabilities,
no_new_privs, the "default" seccomp deny-list, and may write only inside one
work directory (Landlock); reading and executing elsewhere still work.

Run from a checkout after `make` (nothing to set: the corral package and
the build tree's libcorral.so.0 are found from here), or installed (`make
install` or `pip install ./python`: libcorral.so.0 on the loader path).
CORRAL_LIB=/path/to/libcorral.so.0 picks another library.

corral.preexec builds everything BEFORE fork (the rlimit array, the
checked and encoded paths, the compiled seccomp filter); the hook itself
only calls corral's async-signal-safe apply functions.
"""
import os
import subprocess
import sys
import tempfile

try:
    import corral
except ImportError:  # a checkout: examples/ beside python/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import corral


def main() -> int:
    print(f"corral {corral.version()}, landlock ABI {corral.landlock_abi()}", flush=True)
    with tempfile.TemporaryDirectory() as work, tempfile.TemporaryDirectory() as elsewhere:
        hook = corral.preexec(rlimits={"open_files": 64}, confine_writes=[work], seccomp="default")
        print(hook, flush=True)
        script = (
            'grep "Max open files" /proc/self/limits; grep -E "^(NoNewPrivs|Seccomp):" /proc/self/status; '
            'echo ok > "$WORK/inside" && echo "write inside: ok"; '
            'if (echo no > "$ELSEWHERE/outside") 2>/dev/null; then echo "write outside: ALLOWED"; '
            'else echo "write outside: refused"; fi'
        )
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "WORK": work, "ELSEWHERE": elsewhere}
        proc = subprocess.run(["sh", "-c", script], env=env, preexec_fn=hook, capture_output=True, text=True)
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        if proc.returncode != 0:
            print(f"child exited {proc.returncode}", file=sys.stderr)
            return 1
        confined = "write outside: refused" in proc.stdout and not os.path.exists(os.path.join(elsewhere, "outside"))
        return 0 if confined else 1


if __name__ == "__main__":
    sys.exit(main())
