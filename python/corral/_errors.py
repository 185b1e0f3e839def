"""corral's own failures. A program that failed is a Result, never one of these."""
from __future__ import annotations

import errno as _errno
import os


class CorralError(Exception):
    """corral could not do what was asked: not found, a usage error, a limit
    it refuses, no Result written. `exit_code` is the CLI's (2: usage or a
    refusal, 125: it could not run the program), None when no CLI ran."""

    def __init__(self, message: str, exit_code=None, stderr: str = ""):
        super().__init__(message)
        self.exit_code = exit_code
        self.stderr = stderr


class PreexecError(OSError):
    """A step of a preexec hook failed: raised in the parent while preparing
    (a path that does not exist, a seccomp profile libseccomp refuses), or
    in the child between fork and exec (the program is then never run and
    subprocess raises SubprocessError in the parent)."""

    def __init__(self, step: str, err: int, detail: str = ""):
        self.step = step
        text = f"{step}: {os.strerror(err)}" + (f" ({detail})" if detail else "")
        super().__init__(err, text)

    @property
    def errno_name(self) -> str:
        return _errno.errorcode.get(self.errno, str(self.errno))
