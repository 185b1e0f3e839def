"""schema/*.json against real output: every outcome corral can report, from
corral run --json and corral batch, the batch error line, and the audit
lines of the same runs, validated with python3-jsonschema."""
import json
import os
import signal
import subprocess
import time

import pytest
from jsonschema import Draft202012Validator

from contract_support import BUILD, CLI, cli, corral, schema  # noqa: F401 (cli: a fixture)

RESULT = Draft202012Validator(schema("result.schema.json"))
AUDIT = Draft202012Validator(schema("audit.schema.json"))
JOB = Draft202012Validator(schema("job.schema.json"))


def valid(validator, obj, what):
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.path))
    assert not errors, f"{what} does not match its schema:\n" + "\n".join(
        f"  at {'/'.join(map(str, e.path)) or '(top)'}: {e.message}" for e in errors[:8]) + f"\n{json.dumps(obj)[:2000]}"


def run_json(*args):
    p = corral("run", "--json", *args)
    assert p.stdout.strip(), p.stderr
    return json.loads(p.stdout)


def descendant_named(ancestor, comm):
    """Whether a process named `comm` (after its exec) descends from `ancestor`."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as f:
                if f.read().strip() != comm:
                    continue
            pid = int(entry)
            while pid > 1:
                with open(f"/proc/{pid}/stat") as f:
                    pid = int(f.read().rsplit(")", 1)[1].split()[1])
                if pid == ancestor:
                    return True
        except (OSError, ValueError, IndexError):
            continue
    return False


def root_container_or_skip(cli):
    if os.geteuid() != 0:
        pytest.skip("tier container's cgroup needs root here")
    facts = corral("enforcement", "--tier", "container").stdout
    if "memory_bytes" not in facts or "unsupported" in [l.split()[-1] for l in facts.splitlines()
                                                         if l.startswith("memory_bytes")][:1]:
        pytest.skip("no memory cgroup for tier container on this host")


# (name, corral run args, expected outcome)
RUNS = [
    ("exited", ["--", "true"], "exited"),
    ("exited non-zero with output", ["--", "sh", "-c", "echo out; echo err >&2; exit 3"], "exited"),
    ("signaled", ["--", "sh", "-c", "kill -SEGV $$"], "signaled"),
    ("killed_timeout", ["--limit", "wall_seconds=1", "--grace", "0", "--", "sleep", "30"], "killed_timeout"),
    ("killed_resource file_bytes", ["--limit", "file_bytes=4096", "--", "sh", "-c",
                                    "exec head -c 100000 /dev/zero > big"], "killed_resource"),
    ("killed_resource stdout_bytes", ["--limit", "stdout_bytes=10", "--on-output-limit", "kill", "--",
                                      "sh", "-c", "yes | head -c 100000; sleep 5"], "killed_resource"),
    ("killed_resource cpu_seconds", ["--limit", "cpu_seconds=1", "--", "sh", "-c", "while :; do :; done"],
     "killed_resource"),
    ("spawn_failed", ["--", "/nonexistent/program"], "spawn_failed"),
    ("spawn_failed inputs", ["--input", "/nonexistent/input.txt", "--", "true"], "spawn_failed"),
    ("tier none", ["--tier", "none", "--", "true"], "exited"),
    ("not UTF-8 output", ["--", "printf", "\\377\\376 bytes"], "exited"),
]


@pytest.mark.parametrize("name,args,outcome", RUNS, ids=[r[0] for r in RUNS])
def test_corral_run_json_matches_the_result_schema(cli, tmp_path, name, args, outcome):
    audit = tmp_path / "audit.jsonl"
    r = run_json("--audit", str(audit), *args)
    assert r["outcome"] == outcome, r["detail"]
    valid(RESULT, r, f"the Result of {name}")
    lines = audit.read_text().splitlines()
    assert len(lines) == 1
    a = json.loads(lines[0])
    valid(AUDIT, a, f"the audit line of {name}")
    assert a["run_id"] == r["run_id"] and a["outcome"] == r["outcome"]


def test_artifacts_with_and_without_a_copy(cli, tmp_path):
    keep = tmp_path / "keep"
    keep.mkdir()
    listed = run_json("--output", "*.txt", "--", "sh", "-c", "echo a > a.txt")
    copied = run_json("--output", "*.txt", "--artifact-root", str(keep), "--", "sh", "-c", "echo a > a.txt")
    skipped = run_json("--output", "*.txt", "--limit", "artifact_bytes=1", "--", "sh", "-c", "echo abc > a.txt")
    for r in (listed, copied, skipped):
        valid(RESULT, r, "a Result with outputs")
    assert listed["artifacts"][0]["path"] is None and copied["artifacts"][0]["path"]
    assert skipped["artifacts"] == [] and skipped["artifact_notes"], skipped


def test_tier_container_and_killed_oom(cli, tmp_path):
    root_container_or_skip(cli)
    audit = tmp_path / "audit.jsonl"
    ok = run_json("--audit", str(audit), "--tier", "container", "--", "true")
    oom = run_json("--audit", str(audit), "--tier", "container", "--limit", "memory_bytes=33554432",
                   "--ro-bind", f"{BUILD}/helpers:/helpers", "--", "/helpers/memhog", "grow")
    assert ok["outcome"] == "exited", ok["detail"]
    assert oom["outcome"] == "killed_oom", oom["detail"]
    assert ok["timings"]["exec"] is None
    for r in (ok, oom):
        valid(RESULT, r, f"tier container {r['outcome']}")
    for line in audit.read_text().splitlines():
        valid(AUDIT, json.loads(line), "a tier container audit line")


def test_batch_lines_error_lines_and_cancelled(cli, tmp_path):
    jobs = [
        {"id": "ok", "argv": ["echo", "hi"]},
        {"id": 7, "argv": ["sh", "-c", "exit 2"], "limits": {"wall_seconds": 5}, "tier": "none"},
        {"id": "missing", "argv": ["/nonexistent"]},
        {"argv": ["true"]},
    ]
    for job in jobs:
        valid(JOB, job, "a job line of this test")
    lines = [json.dumps(j) for j in jobs] + ['{"id": "bad", "argv": ["x"], "bogus": 1}', "not json"]
    audit = tmp_path / "audit.jsonl"
    p = corral("batch", "--audit", str(audit), input="\n".join(lines) + "\n")
    out = [json.loads(l) for l in p.stdout.splitlines()]
    assert len(out) == 6, p.stdout + p.stderr
    for r in out:
        valid(RESULT, r, f"batch line {r.get('line')}")
    by_line = {r["line"]: r for r in out}
    assert by_line[5]["outcome"] == "error" and by_line[5]["id"] == "bad"
    assert by_line[6]["outcome"] == "error" and by_line[6]["id"] is None
    assert by_line[4]["id"] is None and by_line[2]["id"] == "7"
    assert by_line[3]["outcome"] == "spawn_failed" and by_line[3]["error"]
    audited = [json.loads(line) for line in audit.read_text().splitlines()]
    assert len(audited) == 6, audited  # every job line, refused or not
    for a in audited:
        valid(AUDIT, a, "a batch audit line")
    assert sorted(a["line"] for a in audited if a["outcome"] == "error") == [5, 6]

    # cancelled: SIGTERM to a batch with runs in flight.
    proc = subprocess.Popen([CLI, "batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    proc.stdin.write(json.dumps({"id": "slow", "argv": ["sleep", "30"]}) + "\n")
    proc.stdin.flush()
    # In flight: the run's program is a descendant of the batch (a fixed
    # sleep lost the race to a sanitized corral's slower start, and the
    # SIGTERM found it before its handler).
    deadline = time.monotonic() + 30
    while not descendant_named(proc.pid, "sleep") and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    r = json.loads(out.splitlines()[0])
    assert r["outcome"] == "cancelled", r
    valid(RESULT, r, "a cancelled Result")


def test_a_refused_runs_audit_line_matches_the_audit_schema(cli, tmp_path):
    audit = tmp_path / "audit.jsonl"
    p = corral("run", "--audit", str(audit), "--untrusted", "--", "true")
    assert p.returncode == 2, p.stderr
    lines = audit.read_text().splitlines()
    assert len(lines) == 1
    a = json.loads(lines[0])
    valid(AUDIT, a, "a refused run's audit line")
    assert a["outcome"] == "error" and "untrusted" in a["error"] and a["run_id"] == ""
    # The same keys as a run's line.
    ran = tmp_path / "ran.jsonl"
    run_json("--audit", str(ran), "--", "true")
    assert list(json.loads(ran.read_text())) == list(a)


def test_every_key_is_present_in_every_outcome(cli):
    # Fixed keys: the keys of an exited and of a spawn_failed Result are the same.
    a = run_json("--", "true")
    b = run_json("--", "/nonexistent")
    assert sorted(a) == sorted(b)
    assert sorted(a) == sorted(schema("result.schema.json")["$defs"]["result"]["required"])


def test_the_job_schema_refuses_what_corral_refuses(cli):
    for bad in ({"argv": ["true"], "bogus": 1}, {"argv": "true"}, {"argv": ["true"], "tier": "vm"},
                {"argv": ["true"], "limits": {"no_such": 1}}, {"argv": ["true"], "net": "all"}):
        assert list(JOB.iter_errors(bad)), f"the schema accepts {bad}"
        p = corral("batch", input=json.dumps(bad) + "\n")
        assert json.loads(p.stdout)["outcome"] == "error", f"corral accepts {bad}"


def test_shard_lines_their_end_line_and_the_merge_match_the_result_schema(cli, tmp_path):
    jobs = tmp_path / "jobs.jsonl"
    lines = [json.dumps({"id": f"j{k}", "argv": ["sh", "-c", f"echo {k}; exit {k % 3}"]}) for k in range(6)]
    lines.insert(2, '{"id": "broken", "argv": [')
    jobs.write_text("\n".join(lines) + "\n")
    files = []
    for i in range(2):
        p = corral("batch", "--shard", f"{i}/2", str(jobs))
        assert p.returncode == 0, p.stderr
        out = p.stdout.splitlines()
        assert json.loads(out[-1])["shard_end"] == f"{i}/2"
        for line in out:
            valid(RESULT, json.loads(line), f"shard {i}/2 line")
        f = tmp_path / f"shard-{i}.jsonl"
        f.write_text(p.stdout)
        files.append(str(f))
    m = corral("merge", "--jobs", str(jobs), *files)
    assert m.returncode == 0, m.stderr
    merged = [json.loads(l) for l in m.stdout.splitlines()]
    assert len(merged) == 7
    for r in merged:
        assert "shard" not in r and "jobs_sha256" not in r
        valid(RESULT, r, "a merged line")
