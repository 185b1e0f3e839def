"""corral.run and corral.batch against the checkout's CLI: the Result
mirrors the JSON one key for key, failures are Results, corral's own
refusals are CorralError, batch streams."""
import dataclasses
import json
import os
import subprocess
import threading
import time

import pytest

import corral


def test_result_mirrors_every_key_of_the_json_result():
    r = corral.run(["sh", "-c", "echo out; echo err >&2; exit 3"], limits={"wall_seconds": 10})
    raw = json.loads(subprocess.run([corral.cli_path(), "run", "--json", "--", "true"],
                                    capture_output=True, text=True).stdout)
    names = {f.name for f in dataclasses.fields(corral.Result)}
    assert set(raw) - names == set(), "JSON keys the dataclass lacks"
    assert r.extra == {}
    assert (r.outcome, r.exit_code, r.stdout, r.stderr) == ("exited", 3, "out\n", "err\n")
    assert r.limits["wall_seconds"] == 10 and r.enforcement["wall_seconds"] == "supervisor"
    assert not r.ok


def test_a_killed_program_is_a_result_not_an_exception():
    r = corral.run(["sleep", "30"], limits={"wall_seconds": 1}, grace_seconds=0)
    assert r.outcome == "killed_timeout" and r.exit_code is None and r.wall_seconds < 10
    r = corral.run(["sh", "-c", "kill -SEGV $$"])
    assert (r.outcome, r.signal) == ("signaled", 11)


def test_fields_become_flags(tmp_path):
    src = tmp_path / "data.txt"
    src.write_text("hello\n")
    r = corral.run(["sh", "-c", 'cat data.txt inline.txt; echo "$GREETING"; cat'],
                   inputs=[str(src), {"name": "inline.txt", "bytes": "inline\n"}],
                   env={"GREETING": "hi"}, stdin="from stdin\n", tier="none")
    assert r.stdout == "hello\ninline\nhi\nfrom stdin\n", r.stderr
    assert r.tier == "none"


def test_corrals_own_refusals_raise_with_its_message_and_exit_code():
    with pytest.raises(corral.CorralError) as e:
        corral.run(["true"], limits={"no_such_limit": 1})
    assert e.value.exit_code == 2 and "no_such_limit" in str(e.value)
    with pytest.raises(TypeError, match="shell string"):
        corral.run("echo hi")
    with pytest.raises(TypeError, match="unknown field"):
        corral.run(["true"], limts={"wall_seconds": 1})
    with pytest.raises(corral.CorralError) as e:
        corral.run(["true"], tier="process", untrusted=True)
    assert e.value.exit_code == 2 and "untrusted" in str(e.value)


def test_batch_streams_results_before_the_jobs_end():
    # The third job is produced only after the first result came back: a
    # batch that read all its input first would hang here.
    first_back = threading.Event()

    def jobs():
        yield corral.job(["echo", "one"], id="one")
        yield corral.job(["sh", "-c", "exit 4"], id="two")
        assert first_back.wait(30), "no result came back while the input was still open"
        yield {"argv": ["true"], "bogus": 1, "id": "bad"}

    seen = {}
    for r in corral.batch(jobs(), parallel=2):
        seen[r.id] = r
        first_back.set()
    assert set(seen) == {"one", "two", "bad"}
    assert seen["one"].stdout == "one\n" and seen["two"].exit_code == 4
    assert seen["bad"].outcome == "error" and "bogus" in seen["bad"].error


def test_batch_ids_default_to_the_index_and_plain_argv_lists_work():
    results = {r.id: r for r in corral.batch([["echo", "a"], ["echo", "b"]])}
    assert results["0"].stdout == "a\n" and results["1"].stdout == "b\n"


def test_leaving_a_batch_early_stops_corral_and_its_runs(tmp_path):
    marker = tmp_path / "late"
    jobs = [corral.job(["true"], id="quick")] + [
        corral.job(["sh", "-c", f"sleep 20; touch {marker}"], id=f"slow{i}", tier="none") for i in range(3)]
    gen = corral.batch(jobs, parallel=4)
    first = next(gen)
    assert first.id == "quick"
    start = time.monotonic()
    gen.close()  # terminates corral batch: it cancels the runs in flight
    assert time.monotonic() - start < 15
    out = subprocess.run(["pgrep", "-f", f"touch {marker}"], capture_output=True, text=True).stdout
    assert out.strip() == "", "a run outlived its closed batch"
    assert not marker.exists()


def test_discovery_names_what_it_tried(tmp_path):
    env = dict(os.environ, CORRAL_LIB=str(tmp_path / "libnothing.so"))
    code = "import corral\ntry:\n corral.library()\nexcept corral.CorralError as e:\n print(e)"
    out = subprocess.run([os.sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=os.path.join(os.path.dirname(__file__), "..")).stdout
    assert "libnothing.so" in out and "CORRAL_LIB" in out
    # From a checkout with nothing set, the build tree is found first.
    env = {k: v for k, v in os.environ.items() if k not in ("CORRAL_LIB", "CORRAL_CLI", "CORRAL_BUILD")}
    code = "import corral; print(corral.library_candidates()[0]); print(corral.cli_path())"
    out = subprocess.run([os.sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=os.path.join(os.path.dirname(__file__), "..")).stdout.split()
    checkout = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
    if os.path.exists(os.path.join(checkout, "build", "lib", "libcorral.so.0")):
        assert out[0] == os.path.join(checkout, "build", "lib", "libcorral.so.0")
        assert out[1] == os.path.join(checkout, "build", "bin", "corral")


def test_pip_builds_and_installs_the_package_offline(tmp_path):
    # pip with no index at all, under its build isolation: the in-tree
    # backend needs nothing but the standard library.
    import zipfile
    pkg = os.path.join(os.path.dirname(__file__), "..")
    if subprocess.run([os.sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        pytest.skip(f"{os.sys.executable} has no pip (python3-pip)")
    p = subprocess.run([os.sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-cache-dir",
                        "--target", str(tmp_path / "site"), pkg], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    installed = sorted(os.listdir(tmp_path / "site" / "corral"))
    shipped = sorted(f for f in os.listdir(os.path.join(pkg, "corral")) if f.endswith(".py"))
    assert [f for f in installed if f.endswith(".py")] == shipped
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tmp_path / "site")
    out = subprocess.run([os.sys.executable, "-c", "import corral; print(corral.__file__, corral.__version__)"],
                         env=env, cwd=tmp_path, capture_output=True, text=True).stdout
    assert out.startswith(str(tmp_path / "site" / "corral" / "__init__.py")) and "0.1.0" in out
    sys_path = os.path.join(pkg, "build_backend")
    import importlib.util
    spec = importlib.util.spec_from_file_location("corral_build", os.path.join(sys_path, "corral_build.py"))
    backend = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(backend)
    wheel = backend.build_wheel(str(tmp_path))
    names = zipfile.ZipFile(tmp_path / wheel).namelist()
    assert "corral-0.1.0.dist-info/RECORD" in names and "corral/_preexec.py" in names


def test_a_job_with_bytes_stdin_travels_as_base64():
    line = corral.job(["wc", "-c"], stdin=b"\x00\xff\n")
    assert "stdin" not in line and line["stdin_b64"] == "AP8K"
    with pytest.raises(TypeError, match="unknown job field"):
        corral.job(["true"], stdn="x")
