"""corral.run and corral.batch: the corral CLI's JSON contract, driven.

run() is `corral run --json [flags] -- ARGV`, its keyword arguments named
as the batch job fields are (the same vocabulary as job()); batch() streams
job lines into one `corral batch` and yields each Result line as it comes.
"""
from __future__ import annotations

import base64
import functools
import json
import os
import subprocess
import tempfile
import threading
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

from ._errors import CorralError
from ._lib import cli_path
from ._result import Result

# The job fields (corral(1) JOB FIELDS) run() maps to `corral run` flags:
# field -> (flag, kind). kind: bool (a switch), str (one value), list
# (repeated), kv (K=V repeated), bind (SRC[:DST] repeated).
_FLAGS = {
    "tier": ("--tier", "str"),
    "limits": ("--limit", "kv"),
    "env": ("--env", "kv"),
    "pass_env": ("--pass-env", "list"),
    "secret_env": ("--secret-env", "list"),
    "outputs": ("--output", "list"),
    "cwd": ("--cwd", "str"),
    "merge_output": ("--merge-output", "bool"),
    "confine_writes": ("--confine-writes", "bool"),
    "write_paths": ("--write-path", "list"),
    "net": ("--net", "str"),
    "acknowledge": ("--acknowledge", "list"),
    "grace_seconds": ("--grace-seconds", "str"),
    "on_output_limit": ("--on-output-limit", "str"),
    "artifact_root": ("--artifact-root", "str"),
    "rootfs": ("--rootfs", "str"),
    "binds": ("--bind", "bind"),
    "ro_binds": ("--ro-bind", "bind"),
    "user": ("--user", "str"),
    "loopback": ("--loopback", "bool"),
    "route": ("--route", "str"),
    # Fields of corral versions newer than some CLIs: a CLI without the
    # flag refuses it by name (CorralError, exit 2).
    "chdir": ("--chdir", "str"),
    "tmpfs": ("--tmpfs", "list"),
    "dev_binds": ("--dev-bind", "list"),
    "binary_output": ("--binary-output", "bool"),
}
# Fields of a job that run() handles itself (inputs, stdin_text) or that
# only a batch line has. "stdin" is stdin_text's old name, still accepted.
JOB_FIELDS = sorted(set(_FLAGS) | {"argv", "inputs", "stdin_text", "stdin", "stdin_b64", "source", "interpreter",
                                   "provenance", "id", "session"})


def job(argv: Sequence[str], **fields: Any) -> Dict[str, Any]:
    """One batch job line as a dict: {"argv": [...], **fields}. Field names
    are checked here so a typo fails in Python, not as an error line."""
    _check_argv(argv)
    unknown = sorted(set(fields) - set(JOB_FIELDS))
    if unknown:
        raise TypeError(f"unknown job field(s) {', '.join(unknown)} (fields: {', '.join(JOB_FIELDS)})")
    line = {"argv": list(argv), **{k: v for k, v in fields.items() if v is not None}}
    for key in ("stdin_text", "stdin"):
        if isinstance(line.get(key), (bytes, bytearray)):  # bytes travel as base64
            line["stdin_b64"] = base64.b64encode(line.pop(key)).decode()
    return line


def _check_argv(argv: Sequence[str]) -> None:
    if isinstance(argv, (str, bytes)):
        raise TypeError("argv is a list of strings, never a shell string")
    if not argv:
        raise ValueError("argv is empty")


def _flag_args(fields: Mapping[str, Any]) -> List[str]:
    args: List[str] = []
    for name, value in fields.items():
        if value is None or name not in _FLAGS:
            continue
        flag, kind = _FLAGS[name]
        if kind == "bool":
            if value:
                args.append(flag)
        elif kind == "str":
            args += [flag, str(value)]
        elif kind == "list":
            for item in ([value] if isinstance(value, str) else value):
                args += [flag, str(item)]
        elif kind == "kv":
            for k, v in value.items():
                args += [flag, f"{k}={v}"]
        elif kind == "bind":
            for item in ([value] if isinstance(value, str) else value):
                args += [flag, item if isinstance(item, str) else f"{item[0]}:{item[1]}"]
    return args


@functools.lru_cache(maxsize=None)
def _run_help(cli: str) -> str:
    return subprocess.run([cli, "run", "--help"], capture_output=True, text=True).stdout


def _cli_has(cli: str, option: str) -> bool:
    help_text = _run_help(cli)
    return f"{option} " in help_text or f"{option}=" in help_text


def _parse_result(stdout: str) -> Optional[Result]:
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return Result.from_json(json.loads(line))
    return None


def run(argv: Sequence[str], *, inputs=None, stdin: Union[None, str, bytes] = None, untrusted: bool = False,
        routes: Optional[str] = None, audit: Optional[str] = None, extra_args: Sequence[str] = (),
        timeout: Optional[float] = None, **fields: Any) -> Result:
    """Run argv once with `corral run --json` and return its Result.

    Keyword arguments are the batch job fields (see job(); tier="process"
    by default, limits={"wall_seconds": 10}, env={...}, binds=["/src:/dst"],
    ...), plus untrusted, routes (a routes file, with route=NAME), audit (a
    file to append the audit line to) and extra_args (more `corral run`
    flags, for options this package does not name). inputs: host paths,
    (host_path, name) pairs, or {"name", "host_path" | "bytes"} dicts
    (inline bytes go through a temporary file). stdin: text, or bytes when
    the CLI has --stdin.

    A program that failed is a Result (outcome, exit_code, ...), not an
    exception; CorralError means corral wrote no Result (a usage error, a
    refused limit, the CLI not found), with its message and exit code.
    """
    _check_argv(argv)
    unknown = sorted(set(fields) - set(_FLAGS))
    if unknown:
        raise TypeError(f"unknown field(s) {', '.join(unknown)} for run (fields: {', '.join(sorted(_FLAGS))}, "
                        "inputs, stdin, untrusted, routes, audit, extra_args, timeout)")
    cli = cli_path()
    args = [cli, "run", "--json"] + _flag_args(fields)
    if untrusted:
        args.append("--untrusted")
    if routes:
        args += ["--routes", str(routes)]
    if audit:
        args += ["--audit", str(audit)]
    feed = None
    with tempfile.TemporaryDirectory(prefix="corral-py-") as tmp:
        for i, item in enumerate(inputs or []):
            if isinstance(item, (str, os.PathLike)):
                args += ["--input", os.fspath(item)]
                continue
            if isinstance(item, tuple):
                host, name = item
            else:
                name = item["name"]
                host = item.get("host_path")
                if host is None:
                    data = item["bytes"]
                    host = os.path.join(tmp, f"input-{i}")
                    with open(host, "wb") as f:
                        f.write(data.encode() if isinstance(data, str) else data)
            args += ["--input", f"{os.fspath(host)}:{name}"]
        if stdin is not None:
            if isinstance(stdin, str) and "\0" not in stdin:
                args += ["--stdin-text", stdin]
            elif _cli_has(cli, "--stdin"):
                args += ["--stdin", "-"]
                feed = stdin.encode() if isinstance(stdin, str) else stdin
            else:
                raise CorralError("binary stdin needs a corral CLI with --stdin (this one has only --stdin-text)")
        args += list(extra_args) + ["--", *argv]
        proc = subprocess.run(args, input=feed, stdin=None if feed is not None else subprocess.DEVNULL,
                              capture_output=True, timeout=timeout)
    stdout = proc.stdout.decode("utf-8", "replace")
    stderr = proc.stderr.decode("utf-8", "replace")
    result = _parse_result(stdout)
    if result is None:
        message = stderr.strip() or f"corral run exited {proc.returncode} without a Result"
        raise CorralError(message, exit_code=proc.returncode, stderr=stderr)
    return result


def batch(jobs: Iterable[Union[Mapping[str, Any], Sequence[str]]], *, parallel: Optional[int] = None,
          routes: Optional[str] = None, allow_host_paths: Sequence[str] = (), min_tier: Optional[str] = None,
          untrusted: bool = False, audit: Optional[str] = None, extra_args: Sequence[str] = ()) -> Iterator[Result]:
    """Run jobs through one `corral batch`, yielding each Result as it finishes
    (completion order, not input order: match them by `id`).

    jobs: dicts of job fields (job() builds one) or plain argv lists; a job
    without "id" gets its index ("0", "1", ...). Jobs are written to corral
    from a thread as it reads them, so an endless generator works. A line
    corral refused comes back as a Result with outcome "error" and `error`.
    Closing the iterator early (break) stops corral, which cancels the runs
    in flight. CorralError at the end if corral reports results it could
    not write or a usage error.
    """
    args = [cli_path(), "batch"]
    if parallel:
        args += ["--parallel", str(parallel)]
    if routes:
        args += ["--routes", str(routes)]
    for prefix in allow_host_paths:
        args += ["--allow-host-path", str(prefix)]
    if min_tier:
        args += ["--min-tier", min_tier]
    if untrusted:
        args.append("--untrusted")
    if audit:
        args += ["--audit", str(audit)]
    args += list(extra_args)
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    writer_error: List[BaseException] = []
    err_chunks: List[bytes] = []

    def feed() -> None:
        try:
            for index, item in enumerate(jobs):
                if isinstance(item, Mapping):
                    line = dict(item)
                else:
                    _check_argv(item)
                    line = {"argv": list(item)}
                line.setdefault("id", str(index))
                proc.stdin.write(json.dumps(line).encode() + b"\n")
                proc.stdin.flush()
        except BrokenPipeError:
            pass
        except BaseException as e:  # a job that is not JSON-able: reported after the batch
            writer_error.append(e)
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass

    writer = threading.Thread(target=feed, daemon=True)
    reader = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()), daemon=True)
    writer.start()
    reader.start()
    finished = False
    try:
        for raw in proc.stdout:
            text = raw.decode("utf-8", "replace").strip()
            if text:
                yield Result.from_json(json.loads(text))
        finished = True
    finally:
        if not finished and proc.poll() is None:
            proc.terminate()  # corral cancels the runs in flight and writes their results
        proc.stdout.close()
        rc = proc.wait()
        reader.join()
        writer.join(timeout=5)
    stderr = b"".join(err_chunks).decode("utf-8", "replace")
    if writer_error:
        raise CorralError(f"a job could not be written: {writer_error[0]}", exit_code=rc, stderr=stderr)
    if finished and rc != 0:
        raise CorralError(stderr.strip() or f"corral batch exited {rc}", exit_code=rc, stderr=stderr)
