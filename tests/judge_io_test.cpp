// What a programming-contest judge needs of corral, end to end through the
// CLI: limits with units and fractions (run, batch, routes), a fractional
// cpu_seconds enforced to the millisecond, stdin streamed in (binary-safe),
// output bytes exactly, CPU-limited jobs kept off each other's CPUs by
// default, and batch's summary line on a pipe.
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support.hpp"

using namespace corral_test;
using json = nlohmann::json;

namespace {

struct Ran {
  int code = -1;
  std::string out, err;
};

// A shell line with stdout/stderr captured to files; `line` may pipe into
// corral or redirect its stdin.
Ran shell(const std::string& line) {
  TempDir dir;
  std::string cmd = "(" + line + ") >" + (dir / "out") + " 2>" + (dir / "err");
  int status = std::system(cmd.c_str());
  Ran r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(dir / "out");
  r.err = read_file(dir / "err");
  return r;
}

std::string corral_bin() { return build_dir() + "/bin/corral"; }

std::vector<json> lines_of(const std::string& out) {
  std::vector<json> v;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) v.push_back(json::parse(line));
  return v;
}

}  // namespace

// RLIMIT_CPU counts whole seconds: cpu_seconds=0.25 was 1 s of CPU (or
// refused as "not a non-negative integer"). The supervisor's CPU watch ends
// it at 0.25 s of CPU, measured by the kernel's rusage, and says so.
Test(judge_io, a_fractional_cpu_limit_ends_the_run_within_50_ms_of_it) {
  for (const char* tier : {"none", "process"}) {
    Ran r = shell(corral_bin() + " run --json --tier " + tier + " --limit cpu_seconds=0.25 --limit wall_seconds=60 -- " +
                  helper("hostile") + " spin");
    cr_assert_eq(r.code, 137, "%s: exit %d: %s", tier, r.code, r.err.c_str());
    json j = json::parse(r.out);
    cr_assert_eq(j["outcome"], "killed_resource", "%s", r.out.c_str());
    cr_assert_eq(j["resource"], "cpu_seconds");
    double cpu = j["cpu_seconds"].get<double>();
    cr_assert(cpu >= 0.25 - 0.05 && cpu <= 0.25 + 0.05, "%s: measured CPU %.3f s for cpu_seconds=0.25", tier, cpu);
    cr_assert_eq(j["limits"]["cpu_seconds"].get<double>(), 0.25);
    cr_assert_eq(j["enforcement"]["cpu_seconds"], "supervisor_cpu_clock", "%s", j["enforcement"].dump().c_str());
    cr_assert(contains(j["detail"].get<std::string>(), "cpu_seconds=0.25"), "%s", j["detail"].dump().c_str());
  }
}

Test(judge_io, a_whole_cpu_limit_stays_with_rlimit_cpu) {
  Ran r = shell(corral_bin() + " run --json --limit cpu_seconds=1 --limit wall_seconds=60 -- true");
  cr_assert_eq(r.code, 0, "%s", r.err.c_str());
  json j = json::parse(r.out);
  cr_assert_eq(j["enforcement"]["cpu_seconds"], "hard_per_process");
  cr_assert(j["limits"]["cpu_seconds"].is_number_integer());
}

// RLIMIT_CPU gives each process its own budget: four spinners under
// cpu_seconds=1 used ~4 s and the run "exited" with enforcement "hard". In
// tier container the supervisor reads the run's cgroup and ends the run at
// the limit, whole seconds too.
Test(judge_io, a_whole_cpu_limit_holds_a_forking_container_run) {
  if (geteuid() != 0) cr_skip_test("tier container's cgroup needs root here");
  // A fraction is read from the cgroup wherever the host accounts CPU there.
  Ran probe = shell(corral_bin() + " run --tier container --json --limit cpu_seconds=0.5 -- true");
  json p = json::parse(probe.out);
  if (p["enforcement"]["cpu_seconds"] != "supervisor_cgroup_cpu")
    cr_skip_test("no cgroup CPU accounting here: %s", p["enforcement"].dump().c_str());
  Ran r = shell(corral_bin() + " run --tier container --json --limit cpu_seconds=1 --limit wall_seconds=30 -- sh -c "
                "'for i in 1 2 3 4; do (while :; do :; done) & done; wait'");
  json j = json::parse(r.out);
  cr_assert_eq(j["enforcement"]["cpu_seconds"], "supervisor_cgroup_cpu", "%s", j["enforcement"].dump().c_str());
  cr_assert_eq(j["outcome"], "killed_resource", "%s", r.out.c_str());
  cr_assert_eq(j["resource"], "cpu_seconds");
  double cpu = j["cpu_seconds"].get<double>();
  cr_assert(cpu >= 0.95 && cpu <= 1.3, "measured CPU %.3f s for cpu_seconds=1", cpu);
}

// The same text means the same limit on the command line, in CORRAL_LIMITS,
// in a job line (as text or as a JSON number) and in a routes file.
Test(judge_io, units_and_fractions_parse_the_same_in_run_batch_and_routes) {
  const char* want = R"({"cpu_seconds":0.25,"file_bytes":1000000000,"memory_bytes":536870912,"wall_seconds":1.5})";
  auto pick = [](const json& limits) -> std::string {
    json out;
    for (const char* k : {"cpu_seconds", "file_bytes", "memory_bytes", "wall_seconds"}) out[k] = limits[k];
    return out.dump();
  };
  Ran run = shell(corral_bin() + " run --json -l wall_seconds=1.5 -l cpu_seconds=250ms -l memory_bytes=512MiB " +
                  "-l file_bytes=1G -- true");
  cr_assert_eq(run.code, 0, "%s", run.err.c_str());
  std::string got = pick(json::parse(run.out)["limits"]);
  cr_assert_str_eq(got.c_str(), want);

  Ran env = shell("CORRAL_LIMITS=wall_seconds=1.5,cpu_seconds=0.25,memory_bytes=512Mi,file_bytes=1GB " + corral_bin() +
                  " run --json -- true");
  cr_assert_eq(env.code, 0, "%s", env.err.c_str());
  got = pick(json::parse(env.out)["limits"]);
  cr_assert_str_eq(got.c_str(), want);

  TempDir dir;
  write_file(dir / "jobs",
             R"({"id":"text","argv":["true"],"limits":{"wall_seconds":"1.5","cpu_seconds":"0.25","memory_bytes":"512MiB","file_bytes":"1G"}})"
             "\n"
             R"({"id":"numbers","argv":["true"],"limits":{"wall_seconds":1.5,"cpu_seconds":0.25,"memory_bytes":536870912,"file_bytes":1e9}})"
             "\n");
  Ran batch = shell(corral_bin() + " batch " + (dir / "jobs"));
  cr_assert_eq(batch.code, 0, "%s", batch.err.c_str());
  auto results = lines_of(batch.out);
  cr_assert_eq(results.size(), 2u, "%s", batch.out.c_str());
  for (const json& r : results) {
    got = pick(r["limits"]);
    cr_assert_str_eq(got.c_str(), want, "%s", r.dump().c_str());
  }

  write_file(dir / "routes.toml",
             "[host]\ntrusted_floor = \"none\"\n[[route]]\nname = \"judge\"\nprovenance = \"trusted\"\ntier = \"none\"\nacknowledge_network_egress = true\n"
             "limits = { wall_seconds = 1.5, cpu_seconds = \"250ms\", memory_bytes = \"512MiB\", file_bytes = \"1G\" }\n");
  Ran routed = shell(corral_bin() + " run --json --routes " + (dir / "routes.toml") + " --route judge -- true");
  cr_assert_eq(routed.code, 0, "%s", routed.err.c_str());
  got = pick(json::parse(routed.out)["limits"]);
  cr_assert_str_eq(got.c_str(), want);
}

Test(judge_io, a_bad_unit_is_refused_naming_the_limit_and_the_text) {
  struct Case {
    std::string args, expect;
  } cases[] = {
      {"-l memory_bytes=512X", "limit memory_bytes: '512X': unknown unit 'X'"},
      {"-l wall_seconds=1.0005", "limit wall_seconds: '1.0005': finer than a millisecond"},
      {"-l process_count=1.5", "limit process_count: '1.5'"},
      {"-l file_bytes=1.0000005K", "limit file_bytes: '1.0000005K' is not a whole number of bytes"},
      {"-l cpu_seconds=0ms", "limit cpu_seconds: must be at least 0.001"},
  };
  for (const auto& c : cases) {
    Ran r = shell(corral_bin() + " run " + c.args + " -- true");
    cr_assert_eq(r.code, 2, "%s: exit %d", c.args.c_str(), r.code);
    cr_assert(contains(r.err, c.expect), "%s: %s", c.args.c_str(), r.err.c_str());
  }
  TempDir dir;
  write_file(dir / "jobs", R"({"id":"bad","argv":["true"],"limits":{"memory_bytes":"1 GiB"}})" "\n");
  Ran batch = shell(corral_bin() + " batch " + (dir / "jobs"));
  auto results = lines_of(batch.out);
  cr_assert_eq(results.size(), 1u);
  cr_assert(contains(results[0]["error"].get<std::string>(), "limit memory_bytes: '1 GiB'"), "%s", batch.out.c_str());
}

// 10 MB of random bytes through the program's stdin and back out as a
// digest: every byte arrives, NULs and all, from a file and from a pipe.
Test(judge_io, stdin_streams_10_mb_of_binary_data_intact) {
  TempDir dir;
  Ran made = shell("head -c 10000000 /dev/urandom > " + (dir / "in") + " && sha256sum < " + (dir / "in"));
  cr_assert_eq(made.code, 0);
  std::string digest = made.out.substr(0, 64);
  Ran file = shell(corral_bin() + " run --stdin " + (dir / "in") + " -- sha256sum");
  cr_assert_eq(file.code, 0, "%s", file.err.c_str());
  std::string got = file.out.substr(0, 64);
  cr_assert_str_eq(got.c_str(), digest.c_str());
  Ran piped = shell("cat " + (dir / "in") + " | " + corral_bin() + " run --stdin - -- sha256sum");
  cr_assert_eq(piped.code, 0, "%s", piped.err.c_str());
  got = piped.out.substr(0, 64);
  cr_assert_str_eq(got.c_str(), digest.c_str());
  Ran json_run = shell(corral_bin() + " run --json --stdin - -- wc -c < " + (dir / "in"));
  cr_assert_eq(json_run.code, 0, "%s", json_run.err.c_str());
  got = json::parse(json_run.out)["stdout"].get<std::string>();
  cr_assert_str_eq(got.c_str(), "10000000\n");
}

Test(judge_io, stdin_is_capped_and_said_so) {
  Ran r = shell("head -c 100000 /dev/zero | " + corral_bin() + " run --stdin - --stdin-max-bytes 1KiB -- wc -c");
  cr_assert_eq(r.code, 0, "%s", r.err.c_str());
  cr_assert_str_eq(r.out.c_str(), "1024\n");
  cr_assert(contains(r.err, "corral: stdin cut at 1024 bytes (--stdin-max-bytes)"), "%s", r.err.c_str());
}

// Without --stdin the program's stdin is /dev/null, as before; what changed
// is that corral says so instead of printing 0 with no word why.
Test(judge_io, piped_stdin_without_the_flag_is_not_passed_and_corral_says_so) {
  Ran r = shell("printf 'a\\nb\\n' | " + corral_bin() + " run -- wc -l");
  cr_assert_eq(r.code, 0, "%s", r.err.c_str());
  cr_assert_str_eq(r.out.c_str(), "0\n");
  cr_assert(contains(r.err, "corral: note: corral's stdin is not passed to the program"), "%s", r.err.c_str());
  Ran passed = shell("printf 'a\\nb\\n' | " + corral_bin() + " run --stdin - -- wc -l");
  cr_assert_str_eq(passed.out.c_str(), "2\n", "%s", passed.err.c_str());
  cr_assert_str_eq(passed.err.c_str(), "");
  Ran missing = shell(corral_bin() + " run --stdin /nonexistent/input -- true");
  cr_assert_eq(missing.code, 2);
  cr_assert(contains(missing.err, "--stdin: open /nonexistent/input"), "%s", missing.err.c_str());
}

// The writer upstream may start after corral: the note looks at the pipe
// once the run has ended, so bytes that came while it ran are seen. (It
// looked before the run started: with the writer 0.3 s late it said
// nothing.)
Test(judge_io, stdin_written_while_the_run_lasts_still_gets_the_note) {
  Ran r = shell("(sleep 0.3; printf 'late\\n') | " + corral_bin() + " run -- sleep 1");
  cr_assert_eq(r.code, 0, "%s", r.err.c_str());
  cr_assert(contains(r.err, "corral: note: corral's stdin is not passed to the program"), "%s", r.err.c_str());
}

// Bytes that are not UTF-8 came back as U+FFFD only; with binary_output the
// Result also has them exactly, and a secret is still ***.
Test(judge_io, binary_output_gives_the_bytes_exactly_with_secrets_masked) {
  Ran r = shell("TOKEN=hunter2 " + corral_bin() +
                " run --json --binary-output --secret-env TOKEN -- sh -c 'printf \"\\377\\000x$TOKEN\"; printf \"\\376\" >&2'");
  cr_assert_eq(r.code, 0, "%s", r.err.c_str());
  json j = json::parse(r.out);
  std::string out_b64 = j["stdout_b64"].get<std::string>(), err_b64 = j["stderr_b64"].get<std::string>();
  cr_assert_str_eq(out_b64.c_str(), "/wB4Kioq");  // ff 00 'x' '*' '*' '*'
  cr_assert_str_eq(err_b64.c_str(), "/g==");
  Ran plain = shell(corral_bin() + " run --json -- printf x");
  cr_assert(!json::parse(plain.out).contains("stdout_b64"));

  TempDir dir;
  // "AAEC/w==" is 00 01 02 ff: the job's stdin as bytes, echoed back by cat.
  write_file(dir / "jobs", R"({"id":"b","argv":["cat"],"stdin_b64":"AAEC/w==","binary_output":true})" "\n");
  Ran batch = shell(corral_bin() + " batch " + (dir / "jobs"));
  auto results = lines_of(batch.out);
  cr_assert_eq(results.size(), 1u, "%s %s", batch.out.c_str(), batch.err.c_str());
  std::string echoed = results[0]["stdout_b64"].get<std::string>();
  cr_assert_str_eq(echoed.c_str(), "AAEC/w==", "%s", batch.out.c_str());
  write_file(dir / "bad", R"({"id":"b","argv":["cat"],"stdin_b64":"AA*C"})" "\n");
  auto bad = lines_of(shell(corral_bin() + " batch " + (dir / "bad")).out);
  cr_assert(contains(bad.at(0)["error"].get<std::string>(), "field 'stdin_b64'"), "%s", bad.at(0).dump().c_str());
}

Test(judge_io, batch_on_a_pipe_ends_with_one_summary_line) {
  TempDir dir;
  write_file(dir / "jobs", R"({"id":"ok","argv":["true"]})" "\n" R"({"id":"no","argv":["false"]})" "\n"
                           R"({"id":"slow","argv":["sleep","5"],"limits":{"wall_seconds":0.2}})" "\n"
                           "not json\n");
  Ran r = shell(corral_bin() + " batch " + (dir / "jobs") + " | cat");
  cr_assert_eq(r.code, 0, "%s", r.err.c_str());
  cr_assert_eq(lines_of(r.out).size(), 4u);
  std::string expected_tail = ": exited 2, killed_timeout 1, error 1\n";
  cr_assert(r.err.rfind("corral: batch: 4 jobs in ", 0) == 0, "%s", r.err.c_str());
  cr_assert(r.err.size() > expected_tail.size() &&
                r.err.compare(r.err.size() - expected_tail.size(), expected_tail.size(), expected_tail) == 0,
            "%s", r.err.c_str());
  cr_assert(contains(r.err, " jobs/s)"), "%s", r.err.c_str());
  cr_assert_eq(std::count(r.err.begin(), r.err.end(), '\n'), 1, "%s", r.err.c_str());
}

// Each job notes itself in a directory while it runs and prints how many
// notes it saw: the most any saw is how many ran at once. By default
// CPU-limited jobs run at most one per CPU; others (and an explicit
// --parallel) as many as asked.
Test(judge_io, cpu_limited_jobs_run_at_most_one_per_cpu_by_default) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
  TempDir dir;
  auto jobs = [&](bool cpu_limit) {
    std::string text;
    for (int i = 0; i < 8; ++i) {
      std::string id = std::to_string(i);
      text += R"({"id":")" + id + R"(","tier":"none","argv":["sh","-c","touch )" + (dir / "on") + "/" + id +
              "; sleep 0.4; ls " + (dir / "on") + " | wc -l; rm " + (dir / "on") + "/" + id + R"("])" +
              (cpu_limit ? R"(,"limits":{"cpu_seconds":5,"wall_seconds":60}})" : "}") + "\n";
    }
    return text;
  };
  auto most_at_once = [&](const std::string& args, bool cpu_limit) {
    shell("mkdir -p " + (dir / "on"));
    write_file(dir / "jobs", jobs(cpu_limit));
    Ran r = shell(corral_bin() + " batch " + args + " " + (dir / "jobs"));
    cr_assert_eq(r.code, 0, "%s", r.err.c_str());
    long most = 0;
    for (const json& j : lines_of(r.out)) most = std::max(most, std::stol(j["stdout"].get<std::string>()));
    return most;
  };
  long limited = most_at_once("", true);
  cr_assert_leq(limited, cpus, "%ld CPU-limited jobs ran at once on %ld CPUs", limited, cpus);
  long explicit_parallel = most_at_once("--parallel 8", true);
  cr_assert_gt(explicit_parallel, cpus, "--parallel 8 ran only %ld at once", explicit_parallel);
  long unlimited = most_at_once("", false);
  cr_assert_gt(unlimited, cpus, "jobs without a CPU limit ran only %ld at once", unlimited);
}

// Six spinners sharing one CPU (corral and its children pinned to CPU 0)
// each wait most of their wall_seconds for it: the wall kill says the run
// was starved, with the runqueue wait the kernel counted. A sleeper killed
// at its deadline was not starved.
Test(judge_io, a_wall_kill_of_a_cpu_starved_run_says_so) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 6; ++i)
    text += R"({"id":"spin)" + std::to_string(i) + R"(","tier":"none","argv":[")" + helper("hostile") +
            R"(","spin"],"limits":{"wall_seconds":1}})" + "\n";
  text += R"({"id":"sleep","tier":"none","argv":["sleep","5"],"limits":{"wall_seconds":1}})" "\n";
  write_file(dir / "jobs", text);
  Ran r = shell("taskset -c 0 " + corral_bin() + " batch --parallel 7 " + (dir / "jobs"));
  cr_assert_eq(r.code, 0, "%s", r.err.c_str());
  auto results = lines_of(r.out);
  cr_assert_eq(results.size(), 7u, "%s", r.out.c_str());
  for (const json& j : results) {
    cr_assert_eq(j["outcome"], "killed_timeout", "%s", j.dump().c_str());
    if (j["id"] == "sleep") {
      cr_assert_eq(j["cpu_starved"], false, "%s", j.dump().c_str());
      continue;
    }
    cr_assert_eq(j["cpu_starved"], true, "%s", j.dump().c_str());
    cr_assert_geq(j["cpu_wait_seconds"].get<double>(), 0.25, "%s", j.dump().c_str());
    cr_assert(contains(j["detail"].get<std::string>(), "waited"), "%s", j["detail"].dump().c_str());
  }
}

// SIGXCPU alone was taken as the limit: a program that raised it itself
// after a few ms was killed_resource (cpu_seconds), a verdict a judge
// trusts. The CPU time must show it.
Test(judge_io, a_program_raising_sigxcpu_itself_is_signaled_not_a_cpu_limit) {
  Ran r = shell(corral_bin() + " run --json --limit cpu_seconds=2 --limit wall_seconds=30 -- sh -c 'kill -XCPU $$'");
  json j = json::parse(r.out);
  cr_assert_eq(j["outcome"], "signaled", "%s", r.out.c_str());
  cr_assert_eq(j["signal"], SIGXCPU);
  cr_assert(j["resource"].is_null() || j["resource"] == "", "%s", r.out.c_str());
}

// SIGXFSZ alone was taken as the file_bytes limit, yet the kernel's SIGXFSZ
// and one a program sends itself carry the same siginfo (SI_USER, its own
// pid). The evidence is a workspace file cut at the limit: a program
// stopped writing past file_bytes leaves one, a program raising SIGXFSZ
// itself does not (and is `signaled`, with a detail saying why).
Test(judge_io, a_write_past_file_bytes_is_a_file_bytes_kill) {
  Ran r = shell(corral_bin() +
                " run --json --limit file_bytes=1000 --limit wall_seconds=30 -- dd if=/dev/zero of=big bs=100 count=50");
  json j = json::parse(r.out);
  cr_assert_eq(j["outcome"], "killed_resource", "%s", r.out.c_str());
  cr_assert_eq(j["resource"], "file_bytes", "%s", r.out.c_str());
  cr_assert_eq(j["signal"], SIGXFSZ);
  cr_assert_eq(r.code, 128 + SIGXFSZ);
}

Test(judge_io, a_program_raising_sigxfsz_itself_is_signaled_not_a_file_bytes_kill) {
  // A file under the limit does not count either.
  Ran r = shell(corral_bin() +
                " run --json --limit file_bytes=1000 --limit wall_seconds=30 -- sh -c 'head -c 999 /dev/zero >f; kill -XFSZ $$'");
  json j = json::parse(r.out);
  cr_assert_eq(j["outcome"], "signaled", "%s", r.out.c_str());
  cr_assert_eq(j["signal"], SIGXFSZ);
  cr_assert(j["resource"].is_null() || j["resource"] == "", "%s", r.out.c_str());
  std::string detail = j["detail"];
  cr_assert(contains(detail, "no file in the workspace reached file_bytes (1000 bytes)") &&
                contains(detail, "raised SIGXFSZ itself"),
            "%s", detail.c_str());
}
