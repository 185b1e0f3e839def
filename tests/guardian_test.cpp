// Nothing of a run outlives it, or its supervisor: setpgid and setsid
// escapees at the deadline, at the end, at cancel (tier process as root:
// the uid kill), and when the CLI or a batch is SIGKILLed (the guardian).
// Observed from the host: /proc.
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "corral/enforcement.hpp"
#include "corral/privilege.hpp"
#include "corral/supervisor.hpp"
#include "support.hpp"
#include "supervisor_harness.hpp"

using namespace corral;
using corral_test::helper;
using corral_test::TempDir;
using corral_test::alive;  // reaps it when we are the subreaper

namespace {

void need_root() {
  if (!is_root_capable()) cr_skip_test("needs root: without a uid of its own a run's escapees are out of reach");
}

Request escapees(long ms, const std::string& tag = "") {
  Request r;
  r.tier = Tier::os_process;
  r.inputs.push_back(Input{"hostile", std::nullopt, helper("hostile"), 0755});
  r.argv = {"./hostile", "escapees", std::to_string(ms)};
  if (!tag.empty()) r.argv.push_back(tag);
  return r;
}

std::vector<pid_t> escapee_pids(const std::string& out) {
  std::vector<pid_t> pids;
  for (std::size_t pos = 0; (pos = out.find("escapee ", pos)) != std::string::npos; pos += 8)
    pids.push_back(static_cast<pid_t>(std::stol(out.substr(pos + 8))));
  return pids;
}

// Polls up to `ms` for every pid to be gone; the ones still alive.
std::vector<pid_t> still_alive(const std::vector<pid_t>& pids, int ms) {
  std::vector<pid_t> left = pids;
  for (int waited = 0;; waited += 10) {
    std::vector<pid_t> now;
    for (pid_t p : left)
      if (alive(p)) now.push_back(p);
    left = now;
    if (left.empty() || waited >= ms) return left;
    usleep(10000);
  }
}

// Processes whose command line holds `tag`, ours excepted; with
// run_uids_only, not root's (the CLI and its guardian, which shares the
// CLI's memory and so shows its argv, are root).
std::vector<pid_t> tagged(const std::string& tag, bool run_uids_only = false) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  while (dirent* e = d ? readdir(d) : nullptr) {
    pid_t pid = static_cast<pid_t>(std::atol(e->d_name));
    if (pid <= 0 || pid == getpid()) continue;
    std::string cmd = corral_test::read_file("/proc/" + std::to_string(pid) + "/cmdline");
    for (char& c : cmd)
      if (c == '\0') c = ' ';
    if (cmd.find(tag) == std::string::npos || !alive(pid)) continue;
    if (run_uids_only && corral_test::proc_status_field(std::to_string(pid), "Uid").rfind("0\t", 0) == 0) continue;
    out.push_back(pid);
  }
  if (d) closedir(d);
  return out;
}

void kill_all(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) kill(p, SIGKILL);
}

std::string tag_for(const char* what) { return "corral-guard-" + std::string(what) + "-" + std::to_string(getpid()); }

// fork + exec of the CLI with stdout to /dev/null; its pid.
pid_t start_cli(const std::vector<std::string>& args, const std::string& base, const std::string& stdin_text = "") {
  int in[2];
  cr_assert_eq(pipe(in), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    close(in[0]);
    close(in[1]);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    setenv("CORRAL_WORKSPACE_BASE", base.c_str(), 1);
    std::string cli = corral_test::build_dir() + "/bin/corral";
    std::vector<char*> argv{const_cast<char*>(cli.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(cli.c_str(), argv.data());
    _exit(127);
  }
  close(in[0]);
  if (!stdin_text.empty()) (void)!write(in[1], stdin_text.data(), stdin_text.size());
  close(in[1]);
  return pid;
}

std::size_t entries(const std::string& dir) {
  std::size_t n = 0;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = d ? readdir(d) : nullptr) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

// Another start (a test running beside this one) may be the one sweeping a
// dead record, holding its lock while it does: ours then skips it. Either
// way it is gone soon.
bool empty_soon(const std::string& dir) {
  for (int i = 0; i < 200 && entries(dir) != 0; ++i) usleep(10000);
  return entries(dir) == 0;
}

}  // namespace

Test(guardian, setpgid_and_setsid_escapees_die_at_the_deadline) {
  need_root();
  corral_test::Harness h;
  Request r = escapees(-1);
  r.limits.set(Limit::wall_seconds, 1);
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::killed_timeout, "%s", res.detail.c_str());
  auto pids = escapee_pids(res.stdout_capture.text);
  cr_assert_eq(pids.size(), 2u, "stdout: %s", res.stdout_capture.text.c_str());
  auto left = still_alive(pids, 1000);
  kill_all(left);
  cr_assert(left.empty(), "%zu escapee(s) outlived the deadline by a second", left.size());
}

// The kill helper became the run's uid, so a process of the run could
// SIGSTOP it: a looper stopping everything it may signal left the helper
// stopped and its vfork parent, the supervisor, waiting in the kernel past
// the deadline for good (this test timed out on that code).
Test(guardian, a_run_that_stops_every_process_it_may_still_ends_at_its_deadline, .timeout = 30) {
  need_root();
  corral_test::Harness h;
  Request r;
  r.tier = Tier::os_process;
  r.inputs.push_back(Input{"hostile", std::nullopt, helper("hostile"), 0755});
  r.argv = {"sh", "-c", "setsid ./hostile stop-all 60000 >/dev/null 2>&1 & echo looper $!; sleep 20"};
  r.limits.set(Limit::wall_seconds, 1);
  r.grace_seconds = 0.2;
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::killed_timeout, "%s", res.detail.c_str());
  auto at = res.stdout_capture.text.find("looper ");
  cr_assert(at != std::string::npos, "stdout: %s", res.stdout_capture.text.c_str());
  std::vector<pid_t> looper{static_cast<pid_t>(std::stol(res.stdout_capture.text.substr(at + 7)))};
  auto left = still_alive(looper, 1000);
  kill_all(left);
  cr_assert(left.empty(), "the looper outlived the run");
}

Test(guardian, escapees_die_at_the_end_of_the_run) {
  need_root();
  corral_test::Harness h;
  Result res = h.run(escapees(100));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  auto pids = escapee_pids(res.stdout_capture.text);
  cr_assert_eq(pids.size(), 2u, "stdout: %s", res.stdout_capture.text.c_str());
  auto left = still_alive(pids, 1000);
  kill_all(left);
  cr_assert(left.empty(), "%zu escapee(s) outlived the run", left.size());
  cr_assert_eq(h.leftovers(), 0u);
}

// The end-of-run check that spares the uid kill reads our children from
// /proc/self/task/*/children, which the kernel hands out a page per read.
// With ~900 runs in flight the list is several pages, and the escapees,
// reparented to us last, sit past the first one: they must still count as
// unknown (a check that stopped at the first page and called the rest
// known would spare the kill and leave them running).
Test(guardian, escapees_die_at_the_end_of_the_run_among_hundreds_of_runs) {
  need_root();
  corral_test::Harness h;
  constexpr int kSleepers = 900;  // pids of 5+ digits and a space: past 4 KiB
  std::vector<RunHandle> sleepers;
  for (int i = 0; i < kSleepers; ++i) {
    Request r;
    r.tier = Tier::none;
    r.argv = {"sleep", "60"};
    auto handle = h.sup->submit(std::move(r), RunCallbacks{});
    cr_assert(handle.ok(), "sleeper %d: %s", i, handle.ok() ? "" : handle.error().message().c_str());
    sleepers.push_back(std::move(*handle));
  }
  std::size_t listed = 0;
  for (const char* task : {"/proc/self/task"}) {
    DIR* d = opendir(task);
    while (dirent* e = d ? readdir(d) : nullptr)
      if (e->d_name[0] != '.')
        listed += corral_test::read_file(std::string(task) + "/" + e->d_name + "/children").size();
    if (d) closedir(d);
  }
  cr_assert_gt(listed, 4096u, "the children lists hold %zu bytes: not past one page", listed);
  Result res = h.run(escapees(100));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  auto pids = escapee_pids(res.stdout_capture.text);
  cr_assert_eq(pids.size(), 2u, "stdout: %s", res.stdout_capture.text.c_str());
  auto left = still_alive(pids, 1000);
  kill_all(left);
  for (auto& s : sleepers) s.cancel();
  (void)h.sup->run_until_idle();
  cr_assert(left.empty(), "%zu escapee(s) outlived the run", left.size());
}

// A sibling of the leader (clone with CLONE_PARENT) is a child of the
// thread that cloned the leader, where no reparenting brings it: once the
// Spawner's spawn thread is up (from the second process-tier spawn), that
// thread, not the loop's. The end-of-run check must read every thread's
// children list, or the sibling counts as known and its setsid takes it
// out of the group kill. (With the check reading only the loop thread's
// list, this fails: the sibling outlives the run.)
Test(guardian, a_sibling_of_the_leader_on_the_spawn_thread_dies_at_the_end_of_the_run) {
  need_root();
  corral_test::Harness h;
  // The spawn thread starts at the second such spawn and clones once set up.
  for (int i = 0; i < 4; ++i) {
    Request warm;
    warm.tier = Tier::os_process;
    warm.argv = {"/bin/true"};
    Result w = h.run(std::move(warm));
    cr_assert_eq(w.outcome, Outcome::exited, "%s", w.detail.c_str());
  }
  Request r;
  r.tier = Tier::os_process;
  r.inputs.push_back(Input{"hostile", std::nullopt, helper("hostile"), 0755});
  r.argv = {"./hostile", "sibling", "300"};
  std::string out;
  std::optional<Result> result;
  RunCallbacks cb;
  cb.on_output = [&](StreamId, std::string_view d) { out += d; };
  cb.on_result = [&](const Result& res) { result = res; };
  auto handle = h.sup->submit(std::move(r), cb);
  cr_assert(handle.ok());
  std::vector<pid_t> pids;
  bool on_other_thread = false;
  while (!result) {
    (void)h.sup->run_once(0.02);
    if (pids.empty()) pids = escapee_pids(out);
    if (pids.empty() || on_other_thread) continue;
    // Whose child it is, while the run lasts: not this thread's.
    DIR* d = opendir("/proc/self/task");
    while (dirent* e = d ? readdir(d) : nullptr) {
      if (e->d_name[0] == '.' || std::atol(e->d_name) == static_cast<long>(gettid())) continue;
      std::string list = " " + corral_test::read_file(std::string("/proc/self/task/") + e->d_name + "/children");
      if (list.find(" " + std::to_string(pids[0]) + " ") != std::string::npos) on_other_thread = true;
    }
    if (d) closedir(d);
  }
  cr_assert_eq(result->outcome, Outcome::exited, "%s", result->detail.c_str());
  cr_assert_eq(pids.size(), 1u, "stdout: %s", out.c_str());
  auto left = still_alive(pids, 1000);
  kill_all(left);
  cr_assert(on_other_thread, "the sibling was not a child of another thread (the spawn thread)");
  cr_assert(left.empty(), "the leader's sibling outlived the run");
}

Test(guardian, escapees_die_at_cancel) {
  need_root();
  corral_test::Harness h;
  std::string out;
  std::optional<Result> result;
  RunCallbacks cb;
  cb.on_output = [&](StreamId, std::string_view d) { out += d; };
  cb.on_result = [&](const Result& r) { result = r; };
  auto handle = h.sup->submit(escapees(-1), cb);
  cr_assert(handle.ok());
  auto t0 = std::chrono::steady_clock::now();
  while (escapee_pids(out).size() < 2 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    (void)h.sup->run_once(0.05);
  auto pids = escapee_pids(out);
  cr_assert_eq(pids.size(), 2u, "stdout: %s", out.c_str());
  handle->cancel();
  while (!result) (void)h.sup->run_once(0.1);
  cr_assert_eq(result->outcome, Outcome::cancelled);
  auto left = still_alive(pids, 1000);
  kill_all(left);
  cr_assert(left.empty(), "%zu escapee(s) outlived the cancel", left.size());
}

// `corral run` SIGKILLed: the program (PDEATHSIG) and its escapees (the
// guardian's uid kill) die within 2 s; the next start removes its workspace.
Test(guardian, sigkill_to_the_cli_leaves_nothing_running_and_the_next_start_sweeps) {
  need_root();
  TempDir base;
  chmod(base.path().c_str(), 0755);
  const std::string tag = tag_for("cli");
  pid_t cli = start_cli({"run", "--limit", "wall_seconds=60", "--input", helper("hostile") + ":hostile", "--",
                         "./hostile", "escapees", "-1", tag},
                        base.path());
  std::vector<pid_t> procs;
  for (int i = 0; i < 500 && procs.size() < 3; ++i, usleep(20000)) procs = tagged(tag, /*run_uids_only=*/true);
  if (procs.size() != 3) kill(cli, SIGKILL);
  cr_assert_eq(procs.size(), 3u, "the program and its two escapees should be running");
  cr_assert_eq(entries(base.path()), 1u, "one workspace");
  kill(cli, SIGKILL);
  waitpid(cli, nullptr, 0);
  auto left = still_alive(procs, 2000);
  kill_all(left);
  cr_assert(left.empty(), "%zu process(es) of the run outlived the CLI by 2 s", left.size());
  // (A start in a test running beside this one may sweep it already.)
  auto next = Supervisor::create();  // any start sweeps
  cr_assert(next.ok());
  cr_assert(empty_soon(base.path()), "the next start did not remove the dead CLI's workspace");
}

// Tier container starts no guardian: its pid 1 dies with the CLI
// (PDEATHSIG) and takes the pid namespace along, escapees of the group and
// setsid ones too, seen from the host within 2 s; the CLI has no
// corral-guard child while it runs.
Test(guardian, sigkill_to_a_container_cli_leaves_nothing_running_without_a_guardian) {
  need_root();
  if (!probe_host().user_namespaces) cr_skip_test("no user namespaces here: no container tier");
  TempDir base;
  chmod(base.path().c_str(), 0755);
  const std::string tag = tag_for("container");
  pid_t cli = start_cli({"run", "--tier", "container", "--limit", "wall_seconds=60", "--input",
                         helper("hostile") + ":hostile", "--", "./hostile", "escapees", "-1", tag},
                        base.path());
  std::vector<pid_t> procs;
  for (int i = 0; i < 500 && procs.size() < 3; ++i, usleep(20000)) procs = tagged(tag, /*run_uids_only=*/true);
  // pid 1 (a copy of the CLI, its command line too) counts with them.
  if (procs.size() < 3) kill(cli, SIGKILL);
  cr_assert_geq(procs.size(), 3u, "the program and its two escapees should be running");
  std::string kids = corral_test::children_of(cli);
  std::istringstream in(kids);
  for (std::string p; in >> p;)
    cr_expect_neq(corral_test::read_file("/proc/" + p + "/comm"), "corral-guard\n", "a container run started a guardian");
  kill(cli, SIGKILL);
  waitpid(cli, nullptr, 0);
  auto left = still_alive(procs, 2000);
  kill_all(left);
  cr_assert(left.empty(), "%zu process(es) of the container run outlived the CLI by 2 s", left.size());
}

Test(guardian, sigkill_to_a_batch_leaves_nothing_running_and_the_next_start_sweeps) {
  need_root();
  TempDir base;
  chmod(base.path().c_str(), 0755);
  const std::string tag = tag_for("batch");
  std::string jobs;
  for (int i = 0; i < 3; ++i)
    jobs += "{\"id\":\"j" + std::to_string(i) + "\",\"tier\":\"process\",\"limits\":{\"wall_seconds\":30},"
            "\"inputs\":[{\"host_path\":\"" + helper("hostile") + "\",\"name\":\"hostile\"}],"
            "\"argv\":[\"./hostile\",\"escapees\",\"-1\",\"" + tag + "\"]}\n";
  // The helper is the operator's own file: batch refuses host paths it was not told to allow.
  pid_t batch = start_cli({"batch", "--parallel", "3", "--allow-host-path", helper("hostile")}, base.path(), jobs);
  std::vector<pid_t> procs;
  for (int i = 0; i < 500 && procs.size() < 9; ++i, usleep(20000)) procs = tagged(tag);
  if (procs.empty()) {
    kill(batch, SIGKILL);
    waitpid(batch, nullptr, 0);
    cr_assert_fail("no job started (job format?)");
  }
  cr_assert_eq(procs.size(), 9u, "three programs and six escapees should be running");
  kill(batch, SIGKILL);
  waitpid(batch, nullptr, 0);
  auto left = still_alive(procs, 2000);
  kill_all(left);
  cr_assert(left.empty(), "%zu process(es) of the jobs outlived the batch by 2 s", left.size());
  // (A start in a test running beside this one may sweep them already.)
  auto next = Supervisor::create();
  cr_assert(next.ok());
  cr_assert(empty_soon(base.path()), "the next start did not remove the dead batch's workspaces");
}

// Run ids do not depend on the pid: 1,000 supervisors, each pid 1 of a pid
// namespace of its own (as `corral run` in a fresh container is), make
// 1,000 different first ids (the old ids were all r-1-1).
Test(guardian, run_ids_are_unique_across_pid_namespaces) {
  if (geteuid() != 0) cr_skip_test("needs root for CLONE_NEWPID");
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  const int n = 1000;
  for (int i = 0; i < n; ++i) {
    long pid = syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, 0, 0, 0, 0);
    cr_assert_geq(pid, 0, "clone(CLONE_NEWPID): %s", strerror(errno));
    if (pid == 0) {
      int code = 1;
      {
        auto sup = Supervisor::create();
        if (sup.ok() && getpid() == 1) {
          std::string id = (*sup)->next_run_id() + "\n";
          code = write(fds[1], id.data(), id.size()) == static_cast<ssize_t>(id.size()) ? 0 : 1;
        }
      }
      _exit(code);
    }
    int status = 0;
    waitpid(static_cast<pid_t>(pid), &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d failed", i);
  }
  close(fds[1]);
  std::string all;
  char buf[4096];
  for (ssize_t r; (r = read(fds[0], buf, sizeof buf)) > 0;) all.append(buf, static_cast<std::size_t>(r));
  std::vector<std::string> ids;
  for (std::size_t pos = 0, nl; (nl = all.find('\n', pos)) != std::string::npos; pos = nl + 1)
    ids.push_back(all.substr(pos, nl - pos));
  cr_assert_eq(ids.size(), static_cast<std::size_t>(n));
  std::sort(ids.begin(), ids.end());
  cr_assert(std::adjacent_find(ids.begin(), ids.end()) == ids.end(), "a run id repeated");
  cr_assert(ids[0].rfind("r-", 0) == 0 && ids[0].size() == 2 + 12 + 2, "id shape: %s", ids[0].c_str());
}

Test(guardian, the_enforcement_map_says_what_holds_for_tier_process) {
  HostFacts host = probe_host(false);
  auto summary = enforcement_summary(host, Tier::os_process);
  if (host.root) {
    cr_assert_str_eq(summary["reaps_descendants"].c_str(), "uid");
    cr_assert_str_eq(summary["privilege_drop"].c_str(), "hard_per_run");
  } else {
    cr_assert_str_eq(summary["reaps_descendants"].c_str(), "process_group");
  }
  auto container = enforcement_summary(host, Tier::container);
  cr_assert_str_eq(container["reaps_descendants"].c_str(), "container");
}
