"""corral for Python: the C ABI through ctypes and the CLI's JSON contract.

    corral.preexec(rlimits=..., confine_writes=[...], seccomp="default",
                   drop_to=(uid, gid))   -> a subprocess preexec_fn
    corral.run(argv, tier=..., limits=..., ...) -> Result
    corral.batch(jobs, parallel=...)            -> iterator of Result
    corral.job(argv, **fields)                  -> one batch job (a dict)

Pure Python, no compiled extension. libcorral.so.0 and the corral CLI are
found through CORRAL_LIB / CORRAL_CLI, the build tree when imported from a
checkout, or the loader path and PATH (corral.library_candidates() and
corral.cli_candidates() show where it looks).
"""
from ._cli import JOB_FIELDS, batch, job, run
from ._errors import CorralError, PreexecError
from ._lib import cli_candidates, cli_path, landlock_abi, library, library_candidates, version
from ._preexec import RLIMIT_NAMES, Preexec, preexec
from ._result import Artifact, Result

__version__ = "0.1.0"

__all__ = [
    "Artifact", "CorralError", "JOB_FIELDS", "Preexec", "PreexecError", "RLIMIT_NAMES", "Result",
    "batch", "cli_candidates", "cli_path", "job", "landlock_abi", "library", "library_candidates",
    "preexec", "run", "version",
]
