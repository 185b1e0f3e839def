// `corral session ...` and batch's "session" job field, through the CLI
// binary: the keeper outlives the command that opened it (daemonless), the
// verbs find the session from host state, batch serializes a session's jobs
// and disposes what it opened.
#include <criterion/criterion.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "container_support.hpp"
#include "corral/session.hpp"
#include "session_support.hpp"

using namespace corral;
using namespace container_test;
using namespace session_test;
using corral_test::run_cli;

namespace {

std::string scope_for(const char* name) { return std::string("clitest-") + std::to_string(getpid()) + "-" + name; }

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

int open_devnull() { return open("/dev/null", O_RDWR); }

std::size_t sessions_of(const std::string& scope) {
  std::size_t n = 0;
  for (const auto& s : list_sessions()) n += s.key.scope == scope && s.alive;
  return n;
}

}  // namespace

TestSuite(session_cli, .timeout = 120);

Test(session_cli, open_exec_files_close_daemonless) {
  SKIP_UNLESS_SESSIONS();
  const std::string scope = scope_for("verbs");
  auto open = run_cli({"session", "open", "--scope", scope, "--thread", "t", "--limit", "memory_bytes=268435456"});
  cr_assert_eq(open.code, 0, "%s", open.err.c_str());
  const std::string id = trim(open.out);
  // The command has ended (run_cli waited for it, and its stdout reached
  // EOF: the keeper holds none of its fds), the session lives on.
  auto info = find_session(id);
  cr_assert(info, "%s", info ? "" : info.error().message().c_str());
  cr_expect(process_alive(info->keeper));
  auto again = run_cli({"session", "open", "--scope", scope, "--thread", "t", "--limit", "memory_bytes=268435456"});
  cr_expect_eq(trim(again.out), id, "the same key gave another id");
  cr_expect_eq(run_cli({"session", "exec", id, "--", "/bin/sh", "-c", "echo kept > f; exit 7"}).code, 7);
  auto cat = run_cli({"session", "exec", id, "--", "/bin/cat", "f"});
  cr_expect_eq(cat.out, "kept\n");
  cr_expect_eq(run_cli({"session", "exec", id, "--limit", "wall_seconds=1", "--", "/bin/sleep", "30"}).code, 124);
  // The Result says the kill was confirmed: a setsid escapee of the exec is gone too.
  auto killed = run_cli({"session", "exec", id, "--json", "--limit", "wall_seconds=1", "--", "/bin/sh", "-c",
                         "setsid /bin/sleep 7791 & /bin/sleep 30"});
  cr_expect_eq(killed.code, 124);
  cr_expect(contains(killed.out, "\"kill_confirmed\":true"), "%s", killed.out.c_str());
  cr_expect_eq(host_processes_with("sleep 7791"), 0, "the exec's setsid escapee outlived its kill");
  cr_expect(contains(run_cli({"session", "exec", id, "--json", "--", "/bin/true"}).out, "\"kill_confirmed\":null"));
  cr_expect_eq(run_cli({"session", "put", id, "d/x.txt", "--text", "hello"}).code, 0);
  cr_expect_eq(run_cli({"session", "get", id, "d/x.txt"}).out, "hello");
  auto ls = run_cli({"session", "ls", id, "d/*"});
  cr_expect(contains(ls.out, "d/x.txt"), "%s", ls.out.c_str());
  cr_expect_neq(run_cli({"session", "rm", id, "d"}).code, 0, "a directory removed without -r");
  cr_expect_eq(run_cli({"session", "rm", id, "d", "-r"}).code, 0);
  auto list = run_cli({"session", "list", "--json"});
  cr_expect(contains(list.out, id), "%s", list.out.c_str());
  auto closed = run_cli({"session", "close", "--scope", scope});
  cr_expect_eq(trim(closed.out), "1", "%s", closed.err.c_str());
  cr_expect_eq(sessions_of(scope), 0u);
  cr_expect(!process_alive(info->keeper), "the keeper outlived close");
}

Test(session_cli, batch_serializes_a_sessions_jobs_and_disposes_it) {
  SKIP_UNLESS_SESSIONS();
  const std::string scope = scope_for("batch");
  corral_test::TempDir dir;
  std::string jobs;
  auto job = [&](const std::string& id, const std::string& script) {
    jobs += "{\"id\":\"" + id + "\",\"tier\":\"container\",\"argv\":[\"/bin/sh\",\"-c\",\"" + script +
            "\"],\"session\":{\"scope\":\"" + scope + "\",\"thread\":\"t\"}}\n";
  };
  // Without serialization these would interleave (--parallel 8): each reads
  // the log, sleeps, then appends its own line after what it read.
  for (int i = 1; i <= 4; ++i)
    job("j" + std::to_string(i), "n=$(wc -l < log 2>/dev/null || echo 0); sleep 0.1; echo " + std::to_string(i) +
                                     " $n >> log");
  job("last", "cat log");
  corral_test::write_file(dir / "jobs.jsonl", jobs);
  auto run = run_cli({"batch", "--parallel", "8", "--allow-session-scope", scope, dir / "jobs.jsonl"});
  cr_assert_eq(run.code, 0, "%s", run.err.c_str());
  cr_expect(contains(run.out, "1 0\\n2 1\\n3 2\\n4 3\\n"), "jobs of one session overlapped or reordered: %s",
            run.out.c_str());
  cr_expect_eq(sessions_of(scope), 0u, "the batch left its session open");

  auto kept = run_cli({"batch", "--keep-sessions", "--allow-session-scope", scope, dir / "jobs.jsonl"});
  cr_assert_eq(kept.code, 0, "%s", kept.err.c_str());
  cr_expect_eq(sessions_of(scope), 1u, "--keep-sessions did not keep it");
  cr_expect_eq(dispose_scope(scope), 1);
}

// A batch kills what its jobs leave among its children (a tier none job's
// setsid escapee), and a session keeper it started is its child too (an
// orphan of the keeper's double fork, reparented to the batch as the
// subreaper): it must be spared. One job at a time, so the tier none job's
// end, with nothing else in flight, kills its leftovers at once, while the
// session still has a job to run.
Test(session_cli, a_batch_kills_what_its_jobs_left_and_spares_its_session_keeper) {
  SKIP_UNLESS_SESSIONS();
  const std::string scope = scope_for("spare");
  corral_test::TempDir dir;
  const std::string d = dir.path();
  auto in_session = [&](const std::string& id, const std::string& script) {
    return "{\"id\":\"" + id + "\",\"tier\":\"container\",\"argv\":[\"/bin/sh\",\"-c\",\"" + script +
           "\"],\"session\":{\"scope\":\"" + scope + "\",\"thread\":\"t\"}}\n";
  };
  const std::string escapes = "{\"id\":\"escapes\",\"tier\":\"none\",\"argv\":[\"sh\",\"-c\",\"setsid sh -c 'echo $$ > " +
                              d + "/escapee; exec sleep 7792' </dev/null >/dev/null 2>&1 & " + corral_test::wait_for_file_sh(d + "/escapee") +
                              "\"]}\n";
  corral_test::write_file(dir / "jobs.jsonl",
                          in_session("first", "echo kept > f") + escapes + in_session("second", "cat f"));
  auto run = run_cli({"batch", "--parallel", "1", "--keep-sessions", "--allow-session-scope", scope, dir / "jobs.jsonl"});
  cr_assert_eq(run.code, 0, "%s", run.err.c_str());
  const std::string pid_text = corral_test::read_file(dir / "escapee");
  const pid_t escapee = pid_text.empty() ? 0 : static_cast<pid_t>(std::stol(pid_text));
  cr_expect(escapee > 0, "the escapee did not start: %s", run.out.c_str());
  const bool escaped = escapee > 0 && process_alive(escapee);
  if (escaped) kill(escapee, SIGKILL);
  cr_expect(!escaped, "the tier none job's setsid escapee outlived the batch");
  cr_expect(contains(run.out, "kept\\n"), "the session's second job did not run in it: %s",
            run.out.c_str());
  cr_expect_eq(sessions_of(scope), 1u, "the batch's session keeper was killed");
  cr_expect_eq(dispose_scope(scope), 1);
}

// A job file may be someone else's, and a session key joins the live
// session of that key, whoever opened it: its files and its processes. A
// job line naming a scope the operator did not allow is refused at the
// gate, by line, and reaches no session; one the operator allowed runs.
Test(session_cli, a_batch_job_joins_no_session_of_a_scope_the_operator_did_not_allow) {
  SKIP_UNLESS_SESSIONS();
  const std::string scope = scope_for("victim");
  auto open = run_cli({"session", "open", "--scope", scope, "--thread", "t"});
  cr_assert_eq(open.code, 0, "%s", open.err.c_str());
  const std::string id = trim(open.out);
  cr_assert_eq(run_cli({"session", "put", id, "secret.txt", "--text", "the victim's"}).code, 0);
  corral_test::TempDir dir;
  corral_test::write_file(dir / "jobs.jsonl",
                          "{\"id\":\"steal\",\"tier\":\"container\",\"argv\":[\"/bin/cat\",\"secret.txt\"],"
                          "\"session\":{\"scope\":\"" + scope + "\",\"thread\":\"t\"}}\n");
  auto refused = run_cli({"batch", "--keep-sessions", dir / "jobs.jsonl"});
  cr_expect(!contains(refused.out, "the victim's"), "a job line read another's session: %s", refused.out.c_str());
  cr_expect(contains(refused.out, "\"line\":1") && contains(refused.out, "--allow-session-scope"),
            "the refusal names neither the line nor the option: %s", refused.out.c_str());
  auto other = run_cli({"batch", "--keep-sessions", "--allow-session-scope", "another", dir / "jobs.jsonl"});
  cr_expect(!contains(other.out, "the victim's"), "a job line read another's session: %s", other.out.c_str());
  auto allowed = run_cli({"batch", "--keep-sessions", "--allow-session-scope", scope, dir / "jobs.jsonl"});
  cr_expect(contains(allowed.out, "the victim's"), "an allowed scope did not run: %s %s", allowed.out.c_str(),
            allowed.err.c_str());
  // A line that gives "session" twice: another reader of the file may take
  // the first key where we would take the last. Refused, naming it.
  corral_test::write_file(dir / "twice.jsonl",
                          "{\"id\":\"twice\",\"tier\":\"container\",\"argv\":[\"/bin/cat\",\"secret.txt\"],"
                          "\"session\":{\"scope\":\"another\",\"thread\":\"t\"},"
                          "\"session\":{\"scope\":\"" + scope + "\",\"thread\":\"t\"}}\n");
  auto twice = run_cli({"batch", "--keep-sessions", "--allow-session-scope", scope, dir / "twice.jsonl"});
  cr_expect(!contains(twice.out, "the victim's"), "a line giving 'session' twice ran: %s", twice.out.c_str());
  cr_expect(contains(twice.out, "'session' is given twice"), "%s", twice.out.c_str());
  cr_expect_eq(dispose_scope(scope), 1);
}

// Session jobs go through batch's cpu_seconds queue like any other job: on
// one usable CPU (the default CPU-limited parallelism is one per CPU) three
// CPU-limited jobs in three sessions run one after another, never together,
// though --parallel's default (four per CPU) would let them all start.
Test(session_cli, cpu_limited_session_jobs_wait_for_a_cpu) {
  SKIP_UNLESS_SESSIONS();
  const std::string scope = scope_for("cpuq");
  corral_test::TempDir dir;
  std::string jobs;
  for (const char* t : {"a", "b", "c"})
    jobs += std::string("{\"id\":\"") + t + "\",\"tier\":\"container\",\"limits\":{\"cpu_seconds\":5},"
            "\"argv\":[\"/bin/sh\",\"-c\",\"date +%s.%N; sleep 0.4; date +%s.%N\"],"
            "\"session\":{\"scope\":\"" + scope + "\",\"thread\":\"" + t + "\"}}\n";
  corral_test::write_file(dir / "jobs.jsonl", jobs);
  cpu_set_t saved, one;
  cr_assert_eq(sched_getaffinity(0, sizeof saved, &saved), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &saved)) {
      CPU_SET(c, &one);
      break;
    }
  cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);  // the batch inherits it
  auto run = run_cli({"batch", "--allow-session-scope", scope, dir / "jobs.jsonl"});
  sched_setaffinity(0, sizeof saved, &saved);
  cr_assert_eq(run.code, 0, "%s", run.err.c_str());
  std::vector<std::pair<double, double>> spans;
  std::size_t at = 0;
  while ((at = run.out.find("\"stdout\":\"", at)) != std::string::npos) {
    at += 10;
    double start = 0, end = 0;
    cr_assert_eq(std::sscanf(run.out.c_str() + at, "%lf\\n%lf", &start, &end), 2, "%s", run.out.c_str());
    spans.emplace_back(start, end);
  }
  cr_assert_eq(spans.size(), 3u, "%s", run.out.c_str());
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i)
    cr_expect_geq(spans[i].first, spans[i - 1].second, "CPU-limited session jobs ran together: %s", run.out.c_str());
  cr_expect_eq(sessions_of(scope), 0u, "the batch left its sessions open");
}

// `corral session exec` runs without a guardian process: when it is
// SIGKILLed mid-exec, the exec's leader dies with it (PDEATHSIG) and the
// session's keeper kills what the exec started in its cgroup (a setsid
// child too) once nobody claims that cgroup any more. The session lives on.
Test(session_cli, an_exec_whose_cli_was_sigkilled_leaves_nothing_running) {
  SKIP_UNLESS_SESSIONS();
  const std::string scope = scope_for("sigkill");
  auto open = run_cli({"session", "open", "--scope", scope, "--thread", "t"});
  cr_assert_eq(open.code, 0, "%s", open.err.c_str());
  const std::string id = trim(open.out);
  const std::string cli = corral_test::build_dir() + "/bin/corral";
  // Markers of this run only (a sleeper of another run must not count).
  const std::string escapee = "sleep 1" + std::to_string(getpid() % 100000) + "1";
  const std::string leader = "sleep 1" + std::to_string(getpid() % 100000) + "2";
  // Through a variable: the markers are then in the sleepers' command lines only.
  const std::string script = "m=" + std::to_string(getpid() % 100000) + "; setsid /bin/sleep 1${m}1 & exec /bin/sleep 1${m}2";
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open_devnull();
    dup2(devnull, 1);
    dup2(devnull, 2);
    execl(cli.c_str(), cli.c_str(), "session", "exec", id.c_str(), "--", "/bin/sh", "-c", script.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  cr_assert_gt(pid, 0);
  bool started = false;
  for (int i = 0; i < 1500 && !started; ++i) {
    started = host_processes_with(escapee) == 1 && host_processes_with(leader) == 1;
    if (!started) usleep(20000);
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  cr_assert(started, "the exec's processes did not start within 30 s");
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {  // the keeper looks every second, at groups 2 s old
    gone = host_processes_with(escapee) == 0 && host_processes_with(leader) == 0;
    if (!gone) usleep(20000);
  }
  cr_expect(gone, "the exec's processes outlived its SIGKILLed CLI");
  auto info = find_session(id);
  cr_expect(info && process_alive(info->pid1), "the session died with the exec");
  cr_expect_eq(run_cli({"session", "exec", id, "--", "/bin/true"}).code, 0);
  cr_expect_eq(trim(run_cli({"session", "close", "--scope", scope}).out), "1");
}

// A batch that stops (SIGTERM here; a failed write or a failed loop stop it
// the same way) while session jobs wait for their session's job in flight:
// every job it accepted gets a result line, the waiting ones "cancelled
// before it started", as the jobs waiting for a CPU get.
Test(session_cli, a_stopped_batch_reports_the_session_jobs_still_waiting) {
  SKIP_UNLESS_SESSIONS();
  const std::string scope = scope_for("stop");
  const std::string tag = std::to_string(getpid() % 100000);
  const std::string marker = "sleep 1" + tag + "3";
  std::string jobs;
  auto job = [&](const std::string& id, const std::string& script) {
    jobs += "{\"id\":\"" + id + "\",\"tier\":\"container\",\"argv\":[\"/bin/sh\",\"-c\",\"" + script +
            "\"],\"session\":{\"scope\":\"" + scope + "\",\"thread\":\"t\"}}\n";
  };
  // Through a variable: the marker is then in the sleeper's command line only.
  job("first", "m=" + tag + "; exec /bin/sleep 1${m}3");
  job("second", "echo 2");
  job("third", "echo 3");
  int in[2], out[2];
  cr_assert_eq(pipe2(in, O_CLOEXEC), 0);
  cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
  const std::string cli = corral_test::build_dir() + "/bin/corral";
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    int devnull = open_devnull();
    dup2(devnull, 2);
    execl(cli.c_str(), cli.c_str(), "batch", "--parallel", "8", "--allow-session-scope", scope.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  cr_assert_gt(pid, 0);
  close(in[0]);
  close(out[1]);
  // stdin stays open: the batch stops for the signal, not for the end of its jobs.
  cr_assert_eq(write(in[1], jobs.data(), jobs.size()), static_cast<ssize_t>(jobs.size()));
  bool started = false;
  for (int i = 0; i < 1500 && !started; ++i) {
    started = host_processes_with(marker) == 1;
    if (!started) usleep(20000);
  }
  kill(pid, SIGTERM);
  std::string text;
  char buf[4096];
  for (;;) {
    pollfd p = {out[0], POLLIN, 0};
    if (poll(&p, 1, 30000) <= 0) break;
    ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(in[1]);
  close(out[0]);
  cr_assert(started, "the first job did not start within 30 s: %s", text.c_str());
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 143, "status %d: %s", status, text.c_str());
  std::vector<std::string> lines;
  for (std::size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
    lines.push_back(text.substr(at, nl - at));
  cr_expect_eq(lines.size(), 3u, "every accepted job gets a result line: %s", text.c_str());
  auto line_of = [&](const std::string& id) {
    for (const auto& l : lines)
      if (contains(l, "\"id\":\"" + id + "\"")) return l;
    return std::string();
  };
  cr_expect(contains(line_of("first"), "\"outcome\":\"cancelled\""), "%s", text.c_str());
  for (const char* id : {"second", "third"})
    cr_expect(contains(line_of(id), "cancelled before it started"), "job %s: %s", id, text.c_str());
  cr_expect_eq(host_processes_with(marker), 0);
  cr_expect_eq(sessions_of(scope), 0u, "the stopped batch left its session open");
}

namespace {
// `binary` with `args`, its environment only PATH=/usr/bin:/bin (no corral
// there); stdout captured, stderr to /dev/null.
corral_test::CliRun run_copy(const std::string& binary, const std::vector<std::string>& args) {
  TempDir capture;
  const std::string out_path = capture / "out";
  pid_t pid = fork();
  if (pid == 0) {
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int devnull = open_devnull();
    if (out < 0 || dup2(out, 1) < 0 || dup2(devnull, 2) < 0) _exit(126);
    std::vector<char*> argv{const_cast<char*>(binary.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    char path[] = "PATH=/usr/bin:/bin";
    char* envp[] = {path, nullptr};
    execve(binary.c_str(), argv.data(), envp);
    _exit(127);
  }
  corral_test::CliRun run;
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid)
    run.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = corral_test::read_file(out_path);
  return run;
}
}  // namespace

// A corral binary copied where no bin/corral sits beside it, run with a
// PATH that has no corral: it is its own keeper (/proc/self/exe), so open
// works, and the session it made is a live one the other verbs find.
Test(session_cli, open_from_a_binary_not_on_path_finds_its_keeper) {
  SKIP_UNLESS_SESSIONS();
  const std::string scope = scope_for("copied");
  TempDir dir;
  const std::string copy = dir / "corral";
  {
    std::string bytes = corral_test::read_file(corral_test::build_dir() + "/bin/corral");
    cr_assert_gt(bytes.size(), 0u);
    int fd = open(copy.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    close(fd);
  }
  struct stat st {};
  cr_assert_neq(stat((dir.path() + "/../bin/corral").c_str(), &st), 0, "a bin/corral sits beside the copy");
  auto open = run_copy(copy, {"session", "open", "--scope", scope, "--thread", "t"});
  cr_assert_eq(open.code, 0, "the copy could not open a session (exit %d)", open.code);
  const std::string id = trim(open.out);
  auto info = find_session(id);
  cr_assert(info, "%s", info ? "" : info.error().message().c_str());
  cr_expect(info->alive && process_alive(info->keeper));
  cr_expect_eq(run_copy(copy, {"session", "exec", id, "--", "/bin/true"}).code, 0);
  cr_expect_eq(trim(run_copy(copy, {"session", "close", id}).out), "1");
  cr_expect_eq(sessions_of(scope), 0u);
}

// close prints the count of sessions it disposed, by id as by scope
// (corral(1) says so), and with --json the ids too.
Test(session_cli, close_prints_the_count_and_json_names_the_ids) {
  SKIP_UNLESS_SESSIONS();
  const std::string scope = scope_for("close");
  std::vector<std::string> ids;
  for (const char* thread : {"a", "b", "c"}) {
    auto open = run_cli({"session", "open", "--scope", scope, "--thread", thread});
    cr_assert_eq(open.code, 0, "%s", open.err.c_str());
    ids.push_back(trim(open.out));
  }
  auto one = run_cli({"session", "close", ids[0]});
  cr_expect_eq(one.code, 0, "%s", one.err.c_str());
  cr_expect_eq(one.out, "1\n", "close ID printed '%s'", one.out.c_str());
  auto gone = run_cli({"session", "close", ids[0]});
  cr_expect_neq(gone.code, 0, "closing a closed session succeeded");
  cr_expect_str_empty(gone.out.c_str());
  auto json = run_cli({"session", "close", "--scope", scope, "--json"});
  cr_expect_eq(json.code, 0, "%s", json.err.c_str());
  std::vector<std::string> rest{ids[1], ids[2]};
  std::sort(rest.begin(), rest.end());
  cr_expect_eq(json.out, "{\"closed\":2,\"ids\":[\"" + rest[0] + "\",\"" + rest[1] + "\"],\"problems\":[]}\n", "%s",
               json.out.c_str());
  cr_expect_eq(run_cli({"session", "close", "--scope", scope}).out, "0\n");
  cr_expect_eq(sessions_of(scope), 0u);
}
