"""Where corral is: libcorral.so.0 (for the preexec builder) and the corral
CLI (for run and batch), and the C ABI's prototypes (include/corral/corral.h).

Search order, for both: the environment (CORRAL_LIB, CORRAL_CLI), then the
build tree when this package is imported from a checkout (python/corral/ of
the corral repository: $CORRAL_BUILD, else <checkout>/build), then the
loader path (libcorral.so.0) and PATH (corral). Nothing is loaded at import:
corral.run works with only the CLI installed, corral.preexec with only the
library.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import threading
from pathlib import Path
from typing import List, Optional

from ._errors import CorralError

# <checkout>/python/corral/_lib.py -> <checkout>
_CHECKOUT = Path(__file__).resolve().parents[2]


def _build_dirs() -> List[Path]:
    dirs = []
    if os.environ.get("CORRAL_BUILD"):
        dirs.append(Path(os.environ["CORRAL_BUILD"]))
    if (_CHECKOUT / "include" / "corral" / "corral.h").is_file() and (_CHECKOUT / "Makefile").is_file():
        dirs.append(_CHECKOUT / "build")
    return dirs


def library_candidates() -> List[str]:
    """Where library() looks, in order."""
    if os.environ.get("CORRAL_LIB"):
        return [os.environ["CORRAL_LIB"]]
    found = [str(d / "lib" / "libcorral.so.0") for d in _build_dirs()]
    return [p for p in found if os.path.exists(p)] + ["libcorral.so.0"]


def cli_candidates() -> List[str]:
    """Where cli_path() looks, in order."""
    if os.environ.get("CORRAL_CLI"):
        return [os.environ["CORRAL_CLI"]]
    found = [str(d / "bin" / "corral") for d in _build_dirs()]
    on_path = shutil.which("corral")
    return [p for p in found if os.access(p, os.X_OK)] + ([on_path] if on_path else [])


def cli_path() -> str:
    """The corral CLI corral.run and corral.batch execute."""
    candidates = cli_candidates()
    if not candidates:
        raise CorralError("the corral CLI was not found: set CORRAL_CLI, build the checkout (make), "
                          "or put corral on PATH (make install)")
    return candidates[0]


class _Rlimit(ctypes.Structure):
    _fields_ = [("resource", ctypes.c_int), ("soft", ctypes.c_uint64), ("hard", ctypes.c_uint64)]


_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None


def library() -> ctypes.CDLL:
    """libcorral.so.0, loaded once, with the C ABI's prototypes set."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        errors = []
        for path in library_candidates():
            try:
                lib = ctypes.CDLL(path, use_errno=True)
                break
            except OSError as e:
                errors.append(f"{path}: {e}")
        else:
            raise CorralError("libcorral.so.0 could not be loaded (" + "; ".join(errors) +
                              "): set CORRAL_LIB, build the checkout (make), or make install")
        c_int, c_size_t = ctypes.c_int, ctypes.c_size_t
        proto = {
            "corral_apply_rlimits": ([ctypes.POINTER(_Rlimit), c_size_t], c_int),
            "corral_drop_privileges": ([ctypes.c_uint, ctypes.c_uint], c_int),
            "corral_drop_capabilities": ([], c_int),
            "corral_confine_writes": ([ctypes.POINTER(ctypes.c_char_p), c_size_t], c_int),
            "corral_landlock_abi": ([], c_int),
            "corral_become_subreaper": ([], c_int),
            "corral_seccomp_prepare": ([ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)], c_int),
            "corral_seccomp_apply": ([ctypes.c_void_p], c_int),
            "corral_seccomp_free": ([ctypes.c_void_p], None),
            "corral_version": ([], ctypes.c_char_p),
        }
        for name, (args, res) in proto.items():
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = res
        _lib = lib
        return lib


def version() -> str:
    """The loaded libcorral's version ("0.1.0")."""
    return library().corral_version().decode()


def landlock_abi() -> int:
    """The Landlock ABI this kernel offers, 0 if none."""
    return library().corral_landlock_abi()
