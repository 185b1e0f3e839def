// The cgroup v2 backend on a fake tree that behaves like cgroupfs where it
// can: this host mounts memory and pids on v1 (its v2 mount has hugetlb
// only), so the v2 ceilings cannot be set on the kernel here.
//
// How close it is: mkdir under the fake root is interposed (this binary
// defines mkdir/rmdir/open; libcorral.a's calls bind to them) so that a new
// directory gets the interface files the kernel gives a new v2 cgroup —
// cgroup.{controllers,subtree_control,procs,events,freeze,kill,type,...},
// cpu.stat, and memory.* / pids.* only when its parent's
// cgroup.subtree_control enables that controller (as the kernel does),
// with the kernel's initial values ("max", "0", "populated 0"); a write to
// cgroup.subtree_control accumulates "+memory +pids" as the kernel's list
// does, and a write to any other file replaces its value; rmdir refuses a group that still lists processes (EBUSY) and
// removes its interface files as the kernel would. The tree is laid out as
// systemd lays out a delegated unit (Delegate=yes, DelegateSubgroup=supervisor).
//
// What it does not cover (the kernel's part, run on a v2 host): the
// "no internal processes" EBUSY itself (here the layout decides, as the
// code does), enforcement of memory.max / pids.max, OOM and memory.events
// counting, cgroup.kill and cgroup.freeze semantics, CLONE_INTO_CGROUP,
// delegation checks beyond file modes (nsdelegate), cgroup.events
// notifications. tests/cgroup_test.cpp runs the v2 backend on this host's
// real unified mount for what it has (placement, kill, freeze, removal).
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <sstream>

#include "corral/cgroup.hpp"
#include "corral/run_setup.hpp"
#include "../src/session_cgroup.hpp"
#include "support.hpp"

using namespace corral;
using corral_test::TempDir;

namespace {

std::string g_root;  // the fake hierarchy's root; "" : no faking

bool faked(const char* path) {
  return !g_root.empty() && std::string_view(path).substr(0, g_root.size()) == g_root;
}

long sys_mkdir(const char* path, mode_t mode) { return syscall(SYS_mkdirat, AT_FDCWD, path, mode); }

void put(const std::string& path, const std::string& text) {
  int fd = static_cast<int>(syscall(SYS_openat, AT_FDCWD, path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd < 0) return;
  ssize_t n = ::write(fd, text.data(), text.size());
  (void)n;
  ::close(fd);
}

std::string get(const std::string& path) { return corral_test::read_file(path); }

// "+memory +pids" (or "memory pids") → {"memory", "pids"}, as the kernel lists them.
std::set<std::string> enabled(const std::string& subtree_control) {
  std::set<std::string> on;
  std::string word;
  std::istringstream in(subtree_control);
  while (in >> word) {
    for (std::size_t at = 0; at < word.size();) {
      std::size_t next = word.find_first_of("+-", at + 1);
      std::string tok = word.substr(at, next == std::string::npos ? std::string::npos : next - at);
      if (!tok.empty() && tok[0] == '-') on.erase(tok.substr(1));
      else on.insert(tok[0] == '+' ? tok.substr(1) : tok);
      at = next == std::string::npos ? word.size() : next;
    }
  }
  return on;
}

// The files a kernel >= 6.1 gives a new non-root v2 cgroup.
void populate(const std::string& dir) {
  std::string parent = dir.substr(0, dir.rfind('/'));
  auto on = enabled(get(parent + "/cgroup.subtree_control"));
  std::string controllers;
  for (const auto& c : on) controllers += (controllers.empty() ? "" : " ") + c;
  put(dir + "/cgroup.controllers", controllers + "\n");
  for (const char* f : {"cgroup.subtree_control", "cgroup.procs", "cgroup.threads", "cgroup.kill"}) put(dir + "/" + f, "");
  put(dir + "/cgroup.type", "domain\n");
  put(dir + "/cgroup.events", "populated 0\nfrozen 0\n");
  put(dir + "/cgroup.freeze", "0\n");
  put(dir + "/cgroup.max.depth", "max\n");
  put(dir + "/cpu.stat", "usage_usec 0\nuser_usec 0\nsystem_usec 0\n");
  if (on.count("memory")) {
    for (const char* f : {"memory.max", "memory.high", "memory.swap.max"}) put(dir + "/" + f, "max\n");
    for (const char* f : {"memory.current", "memory.peak", "memory.oom.group", "memory.swap.current"})
      put(dir + "/" + f, "0\n");
    put(dir + "/memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n");
  }
  if (on.count("pids")) {
    put(dir + "/pids.max", "max\n");
    put(dir + "/pids.current", "0\n");
    put(dir + "/pids.events", "max 0\n");
  }
}

// What the cgroup code did to the fake tree, in order: "kill <dir>" (a
// write of 1 to <dir>/cgroup.kill) and "rmdir <dir>".
std::vector<std::string> g_log;

bool our_child(pid_t pid) {
  std::string stat = get("/proc/" + std::to_string(pid) + "/stat");
  auto paren = stat.rfind(')');
  if (paren == std::string::npos) return false;
  std::istringstream in(stat.substr(paren + 2));
  char state;
  pid_t ppid = 0;
  in >> state >> ppid;
  return ppid == getpid();
}

// What the kernel's cgroup.kill leads to: every process of the subtree
// gets SIGKILL (only our own children are ever listed here, and only they
// are signalled), then the groups list none and say populated 0.
void emulate_kill(const std::string& dir) {
  g_log.push_back("kill " + dir);
  std::vector<std::string> tree{dir};
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_directory()) tree.push_back(e.path());
  for (const auto& d : tree) {
    std::istringstream procs(get(d + "/cgroup.procs"));
    pid_t pid;
    while (procs >> pid)
      if (pid > 0 && our_child(pid)) ::kill(pid, SIGKILL);
    put(d + "/cgroup.procs", "");
    put(d + "/cgroup.events", "populated 0\nfrozen 0\n");
  }
}

}  // namespace

// A write of "1" to a fake cgroup.kill kills as the kernel would; every
// other write is the kernel's.
extern "C" ssize_t write(int fd, const void* buf, size_t n) {
  if (!g_root.empty() && n >= 1 && static_cast<const char*>(buf)[0] == '1') {
    char target[PATH_MAX];
    ssize_t len = readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), target, sizeof target - 1);
    if (len > 0) {
      std::string path(target, static_cast<std::size_t>(len));
      if (faked(path.c_str()) && path.ends_with("/cgroup.kill")) emulate_kill(path.substr(0, path.rfind('/')));
    }
  }
  return syscall(SYS_write, fd, buf, n);
}

// The interposers: every mkdir/rmdir/open of this binary (libcorral.a's
// included, not libstdc++.so's) comes here; only paths under g_root are
// treated as cgroupfs.
extern "C" int mkdir(const char* path, mode_t mode) noexcept {
  long r = sys_mkdir(path, mode);
  if (r == 0 && faked(path) && std::string(path) != g_root) populate(path);
  return static_cast<int>(r);
}

extern "C" int rmdir(const char* path) noexcept {
  if (faked(path) && std::filesystem::exists(std::string(path) + "/cgroup.type")) {
    if (!get(std::string(path) + "/cgroup.procs").empty()) {
      errno = EBUSY;
      return -1;
    }
    for (const auto& e : std::filesystem::directory_iterator(path))
      if (e.is_regular_file()) ::unlink(e.path().c_str());
  }
  int r = static_cast<int>(syscall(SYS_unlinkat, AT_FDCWD, path, AT_REMOVEDIR));
  if (r == 0 && faked(path)) g_log.push_back(std::string("rmdir ") + path);
  return r;
}

extern "C" int open(const char* path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = static_cast<mode_t>(va_arg(ap, int));
    va_end(ap);
  }
  // A write to an interface file sets its value (truncate), except
  // cgroup.subtree_control, which keeps a list: "+pids" adds to "+memory".
  if (faked(path) && (flags & O_ACCMODE) == O_WRONLY) {
    if (!std::string_view(path).ends_with("/cgroup.subtree_control"))
      return static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, flags | O_TRUNC, mode));
    int fd = static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, flags | O_APPEND, mode));
    if (fd >= 0) {
      ssize_t n = ::write(fd, " ", 1);
      (void)n;
    }
    return fd;
  }
  return static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, flags, mode));
}

namespace {

// mkdir -p through the interposed mkdir (std::filesystem's calls from
// libstdc++.so bind to libc's, not to this binary's).
void mkdirs(const std::string& path) {
  for (std::size_t at = g_root.size() + 1; at != std::string::npos; at = path.find('/', at + 1))
    ::mkdir(path.substr(0, at).c_str(), 0755);
  ::mkdir(path.c_str(), 0755);
}

// A host as systemd lays it out: the root with every controller enabled
// for system.slice, a service unit with Delegate=memory pids (its
// cgroup.controllers has them; it is ours to write), and corral inside the
// unit's DelegateSubgroup=supervisor.
struct DelegatedUnit {
  TempDir tmp;
  std::string root, unit, supervisor;

  explicit DelegatedUnit(bool subgroup = true, const char* delegated = "memory pids\n") {
    root = tmp / "cgroup2";
    sys_mkdir(root.c_str(), 0755);
    g_root = root;
    put(root + "/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
    put(root + "/cgroup.subtree_control", "cpu io memory pids\n");
    put(root + "/cgroup.procs", "1\n");
    mkdirs(root + "/system.slice");
    put(root + "/system.slice/cgroup.subtree_control", delegated);
    unit = root + "/system.slice/corral-worker.service";
    mkdirs(unit);
    supervisor = subgroup ? unit + "/supervisor" : unit;
    if (subgroup) mkdirs(supervisor);
    put(supervisor + "/cgroup.procs", std::to_string(getpid()) + "\n");
    std::string mountinfo = "30 23 0:26 / " + root + " rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
    put(tmp / "mountinfo", mountinfo);
    put(tmp / "self_cgroup", "0::" + supervisor.substr(root.size()) + "\n");
  }
  ~DelegatedUnit() {
    g_root.clear();
    g_log.clear();
  }

  CgroupProbe probe() { return probe_cgroups({tmp / "mountinfo", tmp / "self_cgroup", "6.18.0"}); }
};

CgroupSpec ceilings() {
  CgroupSpec s;
  s.memory_bytes = 64ull << 20;
  s.pids_max = 32;
  return s;
}

}  // namespace

Test(cgroup_v2_tree, a_fresh_group_gets_the_kernels_files_for_the_controllers_its_parent_enabled) {
  DelegatedUnit h;
  // The unit was made while system.slice enabled memory and pids: it has them.
  cr_assert_eq(get(h.unit + "/cgroup.controllers"), "memory pids\n");
  cr_assert_eq(get(h.unit + "/memory.max"), "max\n");
  // The subgroup was made under a unit that enabled nothing: core files only.
  cr_assert_eq(get(h.supervisor + "/cgroup.controllers"), "\n");
  cr_assert(!std::filesystem::exists(h.supervisor + "/memory.max"));
  cr_assert(std::filesystem::exists(h.supervisor + "/cgroup.kill"));
}

Test(cgroup_v2_tree, in_a_delegated_units_subgroup_runs_go_beside_corral_with_their_ceilings) {
  DelegatedUnit h;
  CgroupProbe p = h.probe();
  cr_assert_eq(p.backend, CgroupVersion::v2, "%s", p.describe().c_str());
  // What the runs can have is what the unit offers, not corral's own leaf.
  cr_assert(p.has("memory") && p.has("pids"), "%s", p.describe().c_str());
  cr_assert(p.v2_kill && p.v2_freeze && p.v2_peak, "%s", p.describe().c_str());

  auto run = create_run_cgroup(p, ceilings(), "judge");
  cr_assert(run.ok(), "%s", run.ok() ? "" : run.error().message().c_str());
  auto dirs = run->dirs();
  cr_assert_eq(dirs.size(), 1u);
  const std::string dir = dirs[0];
  // <unit>/corral/<run>: beside supervisor/, inside the delegation.
  cr_assert_eq(std::filesystem::path(dir).parent_path().string(), h.unit + "/corral", "%s", dir.c_str());
  // corral's own group holds processes: the kernel would refuse it
  // controllers for children (EBUSY), so nothing was asked of it.
  cr_assert_eq(get(h.supervisor + "/cgroup.subtree_control"), "", "%s", get(h.supervisor + "/cgroup.subtree_control").c_str());
  // The unit and the parent group handed memory and pids down...
  cr_assert(enabled(get(h.unit + "/cgroup.subtree_control")) == (std::set<std::string>{"memory", "pids"}));
  cr_assert(enabled(get(h.unit + "/corral/cgroup.subtree_control")) == (std::set<std::string>{"memory", "pids"}));
  // ...so the run's group had the files, and the ceilings are in them.
  cr_assert_eq(get(dir + "/memory.max"), std::to_string(64ull << 20));
  cr_assert_eq(get(dir + "/memory.swap.max"), "0");
  cr_assert_eq(get(dir + "/memory.oom.group"), "1");
  cr_assert_eq(get(dir + "/pids.max"), "32");
  cr_assert(run->swap_capped());
  auto st = run->stats();
  cr_assert(st.ok(), "%s", st.ok() ? "" : st.error().message().c_str());
  cr_assert(!st->oom_killed());

  // A sweep looks where create put them: a group of a dead supervisor goes.
  mkdirs(h.unit + "/corral/run-999999999-0badcafe");
  auto swept = sweep_stale_run_cgroups(p, CgroupSpec{});
  cr_assert(swept.ok() && *swept == 1, "%s", swept.ok() ? std::to_string(*swept).c_str() : swept.error().message().c_str());
  cr_assert(!std::filesystem::exists(h.unit + "/corral/run-999999999-0badcafe"));

  cr_assert(run->remove().ok());
  cr_assert(!std::filesystem::exists(dir), "%s left behind", dir.c_str());
}

Test(cgroup_v2_tree, a_parent_that_holds_processes_or_is_not_ours_is_not_used) {
  {
    // corral directly in the unit (no DelegateSubgroup=): its own group is
    // the only candidate; the parent (system.slice) holds a process.
    DelegatedUnit h(false);
    put(h.root + "/system.slice/cgroup.procs", "4242\n");
    CgroupProbe p = h.probe();
    auto run = create_run_cgroup(p, ceilings(), "x");
    cr_assert(run.ok(), "%s", run.ok() ? "" : run.error().message().c_str());
    cr_assert_eq(std::filesystem::path(run->dirs()[0]).parent_path().string(), h.unit + "/corral");
    (void)run->remove();
  }
  if (geteuid() == 0) return;  // root writes any file: the mode check below needs another uid
  DelegatedUnit h;
  chmod((h.unit + "/cgroup.subtree_control").c_str(), 0444);
  CgroupProbe p = h.probe();
  cr_assert(!p.has("memory"), "the unit is not delegated to us, yet its controllers were offered: %s",
            p.describe().c_str());
}

Test(cgroup_v2_tree, a_group_without_ceilings_still_gets_accounting_and_is_removed_only_when_empty) {
  DelegatedUnit h;
  CgroupProbe p = h.probe();
  auto run = create_run_cgroup(p, CgroupSpec{}, "acct");
  cr_assert(run.ok(), "%s", run.ok() ? "" : run.error().message().c_str());
  const std::string dir = run->dirs()[0];
  // No ceiling asked: memory and pids still come down for peak and count.
  cr_assert(std::filesystem::exists(dir + "/memory.peak") && std::filesystem::exists(dir + "/pids.current"));
  cr_assert_eq(get(dir + "/memory.max"), "max\n");
  // A group that still lists a process cannot go (EBUSY, as on the kernel).
  put(dir + "/cgroup.procs", "4242\n");
  cr_assert_eq(rmdir(dir.c_str()), -1);
  cr_assert_eq(errno, EBUSY);
  put(dir + "/cgroup.procs", "");
  cr_assert(run->remove().ok());
  cr_assert(!std::filesystem::exists(dir));
}

// ---------------------------------------------------------------- sessions on v2
//
// A session's cgroup as the keeper makes it (session_keeper.cpp): the
// container run's group with the session's ceilings, then
// hold_processes_in("init") before pid 1 is cloned into the leaf; each
// exec's group by claim_exec_cgroup (session_cgroup.cpp), the code a
// session exec runs.

namespace {

constexpr std::uint64_t kSessionMemory = 256ull << 20;

struct V2Session {
  DelegatedUnit h;
  CgroupProbe probe;
  std::optional<RunCgroup> group;
  std::string dir;

  explicit V2Session(const char* delegated = "memory pids\n") : h(true, delegated) {
    probe = h.probe();
    cr_assert_eq(probe.backend, CgroupVersion::v2, "%s", probe.describe().c_str());
    CgroupSpec spec;
    spec.memory_bytes = kSessionMemory;
    if (probe.has("pids")) spec.pids_max = 64;
    spec.freezer_kill = false;
    spec.pids_accounting = false;
    auto g = create_run_cgroup(probe, spec, "session");
    cr_assert(g.ok(), "%s", g.ok() ? "" : g.error().message().c_str());
    group.emplace(std::move(*g));
    dir = group->dirs()[0];
  }
};

std::string fd_path(int fd) {
  char buf[PATH_MAX];
  ssize_t n = readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// A child of ours that only waits to be killed: a real pid to list in a
// fake cgroup.procs, so a kill of the listed pids cannot reach anyone else.
pid_t sleeper() {
  pid_t pid = fork();
  if (pid == 0) {
    for (;;) pause();
  }
  cr_assert_gt(pid, 0);
  return pid;
}

// Whether `pid` died of SIGKILL within 3 s (it is killed and reaped either way).
bool died_of_sigkill(pid_t pid) {
  for (int i = 0; i < 300; ++i) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return false;
}

std::size_t index_of(const std::string& entry) {
  auto it = std::find(g_log.begin(), g_log.end(), entry);
  return it == g_log.end() ? SIZE_MAX : static_cast<std::size_t>(it - g_log.begin());
}

std::string log_text() {
  std::string t;
  for (const auto& l : g_log) t += l + "\n";
  return t;
}

}  // namespace

Test(cgroup_v2_tree, a_session_group_holds_no_process_and_hands_memory_and_pids_to_init_and_its_execs) {
  V2Session s;
  cr_assert_eq(get(s.dir + "/memory.oom.group"), "1");  // as a one-shot run's group is made
  auto held = s.group->hold_processes_in("init");
  cr_assert(held.ok(), "%s", held.ok() ? "" : held.error().message().c_str());

  // The session's group: its ceilings, memory and pids for its children,
  // and memory.oom.group 0 so an OOM at its ceiling takes one exec, not all.
  cr_assert_eq(get(s.dir + "/memory.max"), std::to_string(kSessionMemory));
  cr_assert_eq(get(s.dir + "/pids.max"), "64");
  cr_assert(enabled(get(s.dir + "/cgroup.subtree_control")) == (std::set<std::string>{"memory", "pids"}),
            "%s", get(s.dir + "/cgroup.subtree_control").c_str());
  cr_assert_eq(get(s.dir + "/memory.oom.group"), "0");
  cr_assert_eq(s.group->dirs(), std::vector<std::string>{s.dir});
  // pid 1's leaf: made with the controllers (so its memory counts), no
  // ceiling of its own; clone3 and a join go there, never to the session's group.
  cr_assert_eq(get(s.dir + "/init/memory.max"), "max\n");
  struct stat leaf {}, by_fd {};
  cr_assert_eq(stat((s.dir + "/init").c_str(), &leaf), 0);
  cr_assert_eq(fstat(s.group->cgroup_fd(), &by_fd), 0);
  cr_assert_eq(leaf.st_ino, by_fd.st_ino, "cgroup_fd() is %s", fd_path(s.group->cgroup_fd()).c_str());
  cr_assert_eq(s.group->join_fd_count(), 1);
  cr_assert_eq(fd_path(s.group->join_fds()[0]), s.dir + "/init/cgroup.procs");

  // An exec: its own ceilings, the whole exec as the OOM unit, below
  // execs/, held while it runs (the keeper's sweep leaves it alone).
  auto exec = claim_exec_cgroup(s.probe, s.group->dirs(), 64ull << 20, 64, "exec1");
  cr_assert(exec.ok(), "%s", exec.ok() ? "" : exec.error().message().c_str());
  const std::string edir = exec->dirs()[0];
  cr_assert_eq(std::filesystem::path(edir).parent_path().string(), s.dir + "/execs", "%s", edir.c_str());
  cr_assert_eq(get(edir + "/memory.max"), std::to_string(64ull << 20));
  cr_assert_eq(get(edir + "/memory.swap.max"), "0");
  cr_assert_eq(get(edir + "/memory.oom.group"), "1");
  cr_assert_eq(get(edir + "/pids.max"), "64");
  cr_assert(run_cgroup_held(edir));
  cr_assert(enabled(get(s.dir + "/execs/cgroup.subtree_control")) == (std::set<std::string>{"memory", "pids"}));
  cr_assert_eq(fd_path(exec->cgroup_fd()), edir, "the exec is cloned into its own group");
  // Nothing was ever placed in the session's group itself.
  cr_assert_eq(get(s.dir + "/cgroup.procs"), "");

  cr_assert(exec->remove().ok());
  cr_assert(s.group->remove().ok());
  cr_assert(!std::filesystem::exists(s.dir), "%s left behind", s.dir.c_str());
}

Test(cgroup_v2_tree, an_exec_kill_takes_its_group_and_a_dispose_kills_the_session_then_removes_it_bottom_up) {
  V2Session s;
  cr_assert(s.group->hold_processes_in("init").ok());
  auto exec = claim_exec_cgroup(s.probe, s.group->dirs(), std::nullopt, std::nullopt, "exec1");
  cr_assert(exec.ok(), "%s", exec.ok() ? "" : exec.error().message().c_str());
  const std::string edir = exec->dirs()[0];
  // pid 1 in init, an exec's process (and its setsid child, as the kernel
  // lists it too) in the exec's group.
  pid_t pid1 = sleeper(), program = sleeper(), escapee = sleeper();
  put(s.dir + "/init/cgroup.procs", std::to_string(pid1) + "\n");
  put(edir + "/cgroup.procs", std::to_string(program) + "\n" + std::to_string(escapee) + "\n");
  for (const auto& d : {s.dir, s.dir + "/init", s.dir + "/execs", edir}) put(d + "/cgroup.events", "populated 1\nfrozen 0\n");

  // The exec's timeout or cancel: cgroup.kill on its group alone, confirmed
  // by its populated 0; pid 1 is untouched.
  g_log.clear();
  auto killed = exec->kill_all();
  cr_assert(killed.ok(), "%s", killed.ok() ? "" : killed.error().message().c_str());
  cr_assert_eq(g_log, std::vector<std::string>{"kill " + edir}, "%s", log_text().c_str());
  cr_assert(died_of_sigkill(program) && died_of_sigkill(escapee));
  cr_assert_eq(kill(pid1, 0), 0, "the session's pid 1 was killed by an exec's kill");
  cr_assert(exec->remove().ok());
  cr_assert(!std::filesystem::exists(edir));

  // A second exec left running when the session is disposed.
  auto other = claim_exec_cgroup(s.probe, s.group->dirs(), std::nullopt, std::nullopt, "exec2");
  cr_assert(other.ok());
  const std::string odir = other->dirs()[0];
  pid_t straggler = sleeper();
  put(odir + "/cgroup.procs", std::to_string(straggler) + "\n");
  put(odir + "/cgroup.events", "populated 1\nfrozen 0\n");
  put(s.dir + "/cgroup.events", "populated 1\nfrozen 0\n");
  // `other` stays as an exec's owner holds it: a dispose goes by the tree.

  // Dispose: one cgroup.kill on the session's group first (the subtree:
  // pid 1 and every exec), then each group removed after its children.
  g_log.clear();
  auto removed = s.group->remove();
  cr_assert(removed.ok(), "%s", removed.ok() ? "" : removed.error().message().c_str());
  cr_assert(!g_log.empty() && g_log[0] == "kill " + s.dir, "%s", log_text().c_str());
  cr_assert(died_of_sigkill(pid1) && died_of_sigkill(straggler));
  for (const auto& [child, parent] : std::vector<std::pair<std::string, std::string>>{
           {odir, s.dir + "/execs"}, {s.dir + "/execs", s.dir}, {s.dir + "/init", s.dir}}) {
    cr_assert_neq(index_of("rmdir " + child), SIZE_MAX, "%s", log_text().c_str());
    cr_assert_lt(index_of("rmdir " + child), index_of("rmdir " + parent), "%s", log_text().c_str());
  }
  cr_assert_eq(g_log.back(), "rmdir " + s.dir, "%s", log_text().c_str());
  cr_assert(!std::filesystem::exists(s.dir));
}

Test(cgroup_v2_tree, what_a_dead_keeper_left_is_killed_and_removed_from_the_tree_alone) {
  V2Session s;
  cr_assert(s.group->hold_processes_in("init").ok());
  auto exec = claim_exec_cgroup(s.probe, s.group->dirs(), std::nullopt, std::nullopt, "exec1");
  cr_assert(exec.ok());
  const std::string edir = exec->dirs()[0];
  pid_t pid1 = sleeper(), program = sleeper();
  put(s.dir + "/init/cgroup.procs", std::to_string(pid1) + "\n");
  put(edir + "/cgroup.procs", std::to_string(program) + "\n");
  // Another process's sweep (session_state.cpp remove_leftovers): only the
  // paths from the session's state.
  g_log.clear();
  auto gone = kill_and_remove_cgroup_tree(s.dir);
  cr_assert(gone.ok(), "%s", gone.ok() ? "" : gone.error().message().c_str());
  cr_assert(!g_log.empty() && g_log[0] == "kill " + s.dir, "%s", log_text().c_str());
  cr_assert(died_of_sigkill(pid1) && died_of_sigkill(program));
  cr_assert(!std::filesystem::exists(s.dir), "%s", log_text().c_str());
  cr_assert_eq(g_log.back(), "rmdir " + s.dir, "%s", log_text().c_str());
  // Gone already: no error.
  cr_assert(kill_and_remove_cgroup_tree(s.dir).ok());
}

Test(cgroup_v2_tree, a_session_group_that_cannot_hand_pids_down_or_already_holds_a_process_is_refused) {
  {
    // The unit was delegated memory only.
    V2Session s("memory\n");
    auto held = s.group->hold_processes_in("init");
    cr_assert(!held.ok());
    cr_assert_eq(held.error().code(), ENOTSUP);
    const std::string why = held.error().message();
    cr_assert(why.find("pids") != std::string::npos && why.find("cgroup.controllers: memory") != std::string::npos,
              "%s", why.c_str());
    cr_assert(!std::filesystem::exists(s.dir + "/init"));
  }
  {
    V2Session s;
    put(s.dir + "/cgroup.events", "populated 1\nfrozen 0\n");
    auto held = s.group->hold_processes_in("init");
    cr_assert(!held.ok());
    cr_assert_eq(held.error().code(), EBUSY, "%s", held.error().message().c_str());
    put(s.dir + "/cgroup.events", "populated 0\nfrozen 0\n");
  }
}

Test(cgroup_v2_tree, an_exec_that_hit_its_own_ceiling_is_killed_oom_and_one_the_session_ceiling_hit_is_not) {
  V2Session s;
  cr_assert(s.group->hold_processes_in("init").ok());
  auto exec = claim_exec_cgroup(s.probe, s.group->dirs(), 32ull << 20, std::nullopt, "exec1");
  cr_assert(exec.ok());
  const std::string edir = exec->dirs()[0];
  auto classify = [&](const RunCgroup& g) {
    auto st = g.stats();
    cr_assert(st.ok(), "%s", st.ok() ? "" : st.error().message().c_str());
    RunEnd end;
    end.status = ExitStatus{};
    end.status->signal = SIGKILL;
    end.oom_killed = st->ceiling_oom(false);
    Result r;
    classify_outcome(end, Limits{}, r);
    return r.outcome;
  };
  // The kernel's record of an OOM at the exec's memory.max with
  // memory.oom.group 1: the limit reached, the group killed as one.
  put(edir + "/memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 1\n");
  cr_assert_eq(classify(*exec), Outcome::killed_oom);
  // An OOM at the session's ceiling (two execs together): the victim's exec
  // counts the kill, not a limit of its own; the session's group counts the
  // limit. The exec is not killed_oom by its own ceiling.
  put(edir + "/memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 1\noom_group_kill 1\n");
  cr_assert_neq(classify(*exec), Outcome::killed_oom);
}
