"""Result: one JSON Result (corral run --json, a corral batch line) as a
dataclass. Field for field the object schema/result.schema.json describes;
keys a newer corral adds land in `extra` instead of failing."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class Artifact:
    name: str
    bytes: int
    sha256: str
    path: Optional[str] = None  # where it was copied (artifact_root), else None


@dataclass
class Result:
    outcome: str  # exited, signaled, killed_timeout, killed_oom, killed_resource, spawn_failed, cancelled; error (batch)
    schema_version: Optional[int] = None
    id: Optional[str] = None
    line: Optional[int] = None
    run_id: Optional[str] = None
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    resource: Optional[str] = None
    spawn_stage: Optional[str] = None
    spawn_errno: Optional[int] = None
    error: Optional[str] = None
    stdout: str = ""
    stdout_bytes: int = 0
    stdout_truncated: bool = False
    stdout_sha256: str = ""
    stderr: str = ""
    stderr_bytes: int = 0
    stderr_truncated: bool = False
    stderr_sha256: str = ""
    stdout_b64: Optional[str] = None  # the exact bytes, base64, when asked (binary_output)
    stderr_b64: Optional[str] = None
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    cpu_wait_seconds: Optional[float] = None  # killed_timeout: time spent waiting for a CPU (process tiers)
    cpu_starved: bool = False  # a wall kill of a run that waited >= 1/4 of wall_seconds for a CPU
    kill_confirmed: Optional[bool] = None  # a run corral killed: its cgroup found empty afterwards (container tier)
    refused_syscalls: Dict[str, int] = field(default_factory=dict)  # corral's seccomp refusals by syscall (--net none: socket)
    max_rss_bytes: int = 0
    artifacts: List[Artifact] = field(default_factory=list)
    artifact_notes: List[str] = field(default_factory=list)
    limits: Dict[str, int] = field(default_factory=dict)
    enforcement: Dict[str, str] = field(default_factory=dict)
    tier: Optional[str] = None
    env_path: str = ""  # the PATH the program got
    detail: str = ""
    timings: Dict[str, Optional[float]] = field(default_factory=dict)
    extra: Dict[str, Any] = field(default_factory=dict)  # keys this package does not know yet

    @property
    def stdout_bytes_exact(self) -> Optional[bytes]:
        """stdout as the program wrote it (within the cap), when binary_output was asked."""
        import base64
        return None if self.stdout_b64 is None else base64.b64decode(self.stdout_b64)

    @property
    def stderr_bytes_exact(self) -> Optional[bytes]:
        import base64
        return None if self.stderr_b64 is None else base64.b64decode(self.stderr_b64)

    @property
    def ok(self) -> bool:
        """The program exited with status 0."""
        return self.outcome == "exited" and self.exit_code == 0

    @classmethod
    def from_json(cls, obj: Dict[str, Any]) -> "Result":
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in obj.items() if k in names}
        extra = {k: v for k, v in obj.items() if k not in names}
        if "outcome" not in known:
            raise ValueError("not a corral Result: no 'outcome'")
        if known.get("id") is not None:
            known["id"] = str(known["id"])
        known["artifacts"] = [a if isinstance(a, Artifact) else Artifact(**{k: a.get(k) for k in ("name", "bytes", "sha256", "path")})
                              for a in known.get("artifacts") or []]
        for key in ("artifact_notes",):
            if known.get(key) is None:
                known[key] = []
        for key in ("limits", "enforcement", "timings", "refused_syscalls"):
            if known.get(key) is None:
                known[key] = {}
        return cls(**known, extra=extra)
