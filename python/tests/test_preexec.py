"""corral.preexec: observed from the host side (/proc of the child, files
that must not exist), and what a failed step does."""
import errno
import os
import resource
import subprocess
import sys

import pytest

import corral


def test_limits_landlock_seccomp_and_capabilities_seen_from_the_host(tmp_path):
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    os.chmod(outside, 0o777)
    if corral.landlock_abi() < 1:
        pytest.skip("this kernel has no Landlock")
    hook = corral.preexec(rlimits={"open_files": 48, "file_bytes": (1 << 20, 2 << 20)},
                          confine_writes=[work], seccomp=["default", "no-network"])
    # The child waits on stdin so its /proc can be read from here, then tries
    # its writes.
    script = ('read go; echo in > "$1/in"; (echo out > "$2/out") 2>/dev/null || echo refused; '
              '"$3" -c "import socket; socket.socket()" 2>/dev/null || echo no-inet')
    p = subprocess.Popen(["sh", "-c", script, "sh", str(work), str(outside), sys.executable], preexec_fn=hook,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        limits = open(f"/proc/{p.pid}/limits").read()
        status = dict(line.split(":", 1) for line in open(f"/proc/{p.pid}/status").read().splitlines())
    finally:
        out, _ = p.communicate("go\n", timeout=30)
    assert p.returncode == 0
    assert [l for l in limits.splitlines() if l.startswith("Max open files")][0].split()[3:5] == ["48", "48"]
    assert [l for l in limits.splitlines() if l.startswith("Max file size")][0].split()[3:5] == [str(1 << 20), str(2 << 20)]
    assert [l for l in limits.splitlines() if l.startswith("Max core file size")][0].split()[4:6] == ["0", "0"]
    assert status["NoNewPrivs"].strip() == "1"
    assert status["Seccomp"].strip() == "2"
    assert int(status["CapEff"].strip(), 16) == 0
    assert (work / "in").read_text() == "in\n"
    assert not (outside / "out").exists()
    assert "refused" in out and "no-inet" in out


@pytest.mark.skipif(os.geteuid() != 0, reason="drop_to needs root")
def test_drop_to_changes_the_childs_identity_seen_from_the_host():
    hook = corral.preexec(drop_to=(263001, 263002))
    p = subprocess.Popen(["sleep", "5"], preexec_fn=hook)
    try:
        status = open(f"/proc/{p.pid}/status").read()
        # comm may still be the forked Python for a moment: wait for the exec.
        for _ in range(200):
            if open(f"/proc/{p.pid}/comm").read().strip() == "sleep":
                break
            os.sched_yield()
        status = open(f"/proc/{p.pid}/status").read()
    finally:
        p.kill()
        p.wait()
    uids = [l for l in status.splitlines() if l.startswith("Uid:")][0].split()[1:]
    gids = [l for l in status.splitlines() if l.startswith("Gid:")][0].split()[1:]
    groups = [l for l in status.splitlines() if l.startswith("Groups:")][0].split()[1:]
    assert uids == ["263001"] * 4 and gids == ["263002"] * 4 and groups == []


def test_a_failed_step_in_the_child_never_execs_the_program(tmp_path):
    if corral.landlock_abi() < 1:
        pytest.skip("this kernel has no Landlock")
    gone = tmp_path / "gone"
    gone.mkdir()
    hook = corral.preexec(confine_writes=[gone])
    gone.rmdir()  # checked when built; missing when the child opens it
    marker = tmp_path / "ran"
    with pytest.raises(subprocess.SubprocessError):
        subprocess.run(["sh", "-c", f"echo yes > {marker}"], preexec_fn=hook, stderr=subprocess.PIPE)
    assert not marker.exists()


def test_what_the_parent_can_refuse_it_refuses_before_fork(tmp_path):
    with pytest.raises(ValueError, match="not one of"):
        corral.preexec(rlimits={"memroy_bytes": 1})
    with pytest.raises(ValueError, match="negative"):
        corral.preexec(rlimits={"open_files": -1})
    with pytest.raises(ValueError, match="soft .* above hard"):
        corral.preexec(rlimits={"open_files": (10, 5)})
    with pytest.raises(ValueError, match="root"):
        corral.preexec(drop_to=0)
    with pytest.raises(corral.PreexecError) as e:
        corral.preexec(confine_writes=[tmp_path / "nope"])
    assert e.value.errno == errno.ENOENT and e.value.step == "confine_writes"
    with pytest.raises(corral.PreexecError) as e:
        corral.preexec(seccomp="no-such-profile")
    assert e.value.step == "seccomp"


def test_resource_numbers_and_unlimited():
    hook = corral.preexec(rlimits={resource.RLIMIT_NOFILE: 40, "cpu_seconds": None}, core_dumps=True,
                          drop_capabilities=False)
    out = subprocess.run(["cat", "/proc/self/limits"], preexec_fn=hook, capture_output=True, text=True).stdout
    line = [l for l in out.splitlines() if l.startswith("Max open files")][0]
    assert line.split()[3:5] == ["40", "40"]
    assert [l for l in out.splitlines() if l.startswith("Max cpu time")][0].split()[3] == "unlimited"
    assert "core_bytes" not in repr(hook)


def test_the_example_runs_from_a_checkout_with_nothing_set(tmp_path):
    if corral.landlock_abi() < 1:
        pytest.skip("this kernel has no Landlock (the example refuses to run unconfined)")
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python_preexec.py")
    env = {k: v for k, v in os.environ.items() if k not in ("CORRAL_LIB", "CORRAL_CLI", "PYTHONPATH")}
    checkout_build = os.path.realpath(os.path.join(os.path.dirname(example), "..", "build"))
    if os.path.realpath(env.get("CORRAL_BUILD", checkout_build)) == checkout_build:
        env.pop("CORRAL_BUILD", None)  # the default build tree: found with nothing set
    p = subprocess.run([sys.executable, example], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "write inside: ok" in p.stdout and "write outside: refused" in p.stdout
