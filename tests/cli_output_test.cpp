// What `corral run` itself writes: a reader that stalls never holds up the
// deadline, the caps bound what is passed on, a Result that could not be
// written is an error, and the opt-in output-limit kill. Through the real
// binary, observed from outside (/proc, exit status, the files it wrote).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support.hpp"

using namespace corral_test;
using nlohmann::json;

namespace {

std::string corral_bin() { return build_dir() + "/bin/corral"; }

// Starts `corral ARGS` with stdout on `out_fd` and stderr on `err_fd`.
pid_t start(const std::vector<std::string>& args, int out_fd, int err_fd) {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    if (out_fd < 0) close(1);
    else dup2(out_fd, 1);
    dup2(err_fd, 2);
    std::vector<char*> argv;
    std::string bin = corral_bin();
    argv.push_back(bin.data());
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

int wait_code(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Whether a `sh -c ... MARKER` (the run's shell, not corral) is alive.
bool marker_alive(const std::string& marker) {
  DIR* d = opendir("/proc");
  bool found = false;
  while (dirent* e = d ? readdir(d) : nullptr) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::string cmd = read_file(std::string("/proc/") + e->d_name + "/cmdline");
    for (char& c : cmd)
      if (c == '\0') c = ' ';
    // Not a zombie: its cmdline is empty, so it is not found here anyway.
    if (cmd.rfind("sh -c ", 0) == 0 && cmd.find(marker) != std::string::npos) found = true;
  }
  if (d) closedir(d);
  return found;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Ran {
  int code = -1;
  std::string out, err;
};

Ran run_corral(const std::vector<std::string>& args) {
  TempDir dir;
  int out = open((dir / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  int err = open((dir / "err").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  pid_t pid = start(args, out, err);
  close(out);
  close(err);
  Ran r;
  r.code = wait_code(pid);
  r.out = read_file(dir / "out");
  r.err = read_file(dir / "err");
  return r;
}

}  // namespace

TestSuite(cli_output, .timeout = 120);

// corral's stdout is a pipe nobody reads. The program floods it; the
// 1-second deadline must still end it on time. Before, corral blocked in a
// write(2) to the full pipe and the program lived on.
Test(cli_output, a_stalled_stdout_reader_does_not_delay_the_deadline) {
  TempDir dir;
  std::string marker = "stall-marker-" + std::to_string(getpid());
  int p[2];
  cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
  int err = open((dir / "err").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  pid_t pid = start({"run", "--tier", "none", "--limit", "wall_seconds=1", "--grace", "0.2", "--", "sh", "-c",
                     "yes; :", marker},
                    p[1], err);
  close(p[1]);
  close(err);
  auto t0 = std::chrono::steady_clock::now();
  while (!marker_alive(marker) && since(t0) < 10) usleep(5000);
  auto started = std::chrono::steady_clock::now();
  cr_assert(marker_alive(marker), "the program never started");
  while (marker_alive(marker) && since(started) < 10) usleep(20000);
  double lived = since(started);
  // While the reader stalls, corral stopped reading the program's pipe
  // rather than queueing what `yes` wrote (GiB in a second).
  std::string status = read_file("/proc/" + std::to_string(pid) + "/status");
  auto hwm = status.find("VmHWM:");
  long peak_kb = hwm == std::string::npos ? 0 : std::atol(status.c_str() + hwm + 6);
  close(p[0]);  // the reader goes away: corral may finish now
  int code = wait_code(pid);
  cr_assert_lt(lived, 1.5, "the program lived %.2fs under a 1 s deadline behind a stalled reader", lived);
  cr_assert_eq(code, 124);
  cr_assert_lt(peak_kb, 64 * 1024, "corral grew to %ld KiB behind the stalled reader", peak_kb);
  cr_assert(contains(read_file(dir / "err"), "wall_seconds deadline"), "%s", read_file(dir / "err").c_str());
}

// Plain mode passes on at most the caps, and says what it cut (before, all
// 100,000 bytes went through under stdout_bytes=10).
Test(cli_output, plain_mode_passes_on_no_more_than_the_caps) {
  Ran r = run_corral({"run", "--tier", "none", "--limit", "stdout_bytes=10", "--limit", "stderr_bytes=5", "--",
                      "sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a; echo 0123456789 >&2"});
  cr_assert_eq(r.code, 0, "exit %d: %s", r.code, r.err.c_str());
  cr_assert_eq(r.out, "aaaaaaaaaa");
  cr_assert(contains(r.err, "corral: stdout cut at 10 bytes (stdout_bytes=10): 99990 more bytes not shown"), "%s",
            r.err.c_str());
  cr_assert_eq(r.err.rfind("01234corral: ", 0), 0u, "%s", r.err.c_str());  // the program's 5 bytes, then ours
  cr_assert(contains(r.err, "corral: stderr cut at 5 bytes (stderr_bytes=5): 6 more bytes not shown"), "%s",
            r.err.c_str());
}

// --on-output-limit kill: an overrun is a verdict (killed_resource, 137),
// reached quickly; without it the same flood is truncated and exits.
Test(cli_output, output_limit_kill_ends_a_flood_as_killed_resource) {
  auto t0 = std::chrono::steady_clock::now();
  Ran k = run_corral({"run", "--json", "--tier", "none", "--limit", "stdout_bytes=1000", "--on-output-limit",
                      "kill", "--", "yes"});
  double took = since(t0);
  cr_assert_eq(k.code, 137, "exit %d: %s", k.code, k.err.c_str());
  json j = json::parse(k.out);
  cr_assert_eq(j["outcome"], "killed_resource", "%s", k.out.c_str());
  cr_assert_eq(j["resource"], "stdout_bytes");
  cr_assert_eq(j["signal"], SIGKILL);
  cr_assert_eq(j["stdout_truncated"], true);
  cr_assert_lt(took, 5.0, "took %.2fs", took);  // `yes` never ends on its own: only the kill ends it

  Ran t = run_corral({"run", "--json", "--tier", "none", "--limit", "stdout_bytes=1000", "--", "sh", "-c",
                      "head -c 100000 /dev/zero | tr '\\0' a"});
  cr_assert_eq(t.code, 0, "exit %d: %s", t.code, t.err.c_str());
  json tj = json::parse(t.out);
  cr_assert_eq(tj["outcome"], "exited");
  cr_assert_eq(tj["stdout_truncated"], true);
  cr_assert_eq(tj["stdout_bytes"], 100000);

  // stderr too, under the run's own name of the limit; a bad policy is a usage error.
  Ran e = run_corral({"run", "--json", "--tier", "none", "--limit", "stderr_bytes=100", "--on-output-limit", "kill",
                      "--", "sh", "-c", "yes >&2"});
  cr_assert_eq(e.code, 137, "exit %d: %s", e.code, e.err.c_str());
  cr_assert_eq(json::parse(e.out)["resource"], "stderr_bytes");
  Ran bad = run_corral({"run", "--on-output-limit", "explode", "--", "true"});
  cr_assert_eq(bad.code, 2);
  cr_assert(contains(bad.err, "corral: --on-output-limit"), "%s", bad.err.c_str());
}

// A --json Result that cannot be written is an error naming the run, never
// a silent exit 0: a full device and a closed stdout.
Test(cli_output, a_result_that_cannot_be_written_exits_125_naming_the_run) {
  int full = open("/dev/full", O_WRONLY | O_CLOEXEC);
  if (full < 0) cr_skip_test("no /dev/full here");
  TempDir dir;
  for (int out_fd : {full, -1}) {
    int err = open((dir / "err").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    pid_t pid = start({"run", "--json", "--tier", "none", "--", "true"}, out_fd, err);
    close(err);
    int code = wait_code(pid);
    std::string text = read_file(dir / "err");
    cr_assert_eq(code, 125, "exit %d with stdout %s: %s", code, out_fd < 0 ? "closed" : "/dev/full", text.c_str());
    cr_assert(contains(text, "corral: the Result of run r-"), "%s", text.c_str());
    cr_assert(contains(text, out_fd < 0 ? "Bad file descriptor" : "No space left on device"), "%s", text.c_str());
  }
  close(full);
}
