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
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <sstream>

#include "corral/cgroup.hpp"
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

}  // namespace

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
  return static_cast<int>(syscall(SYS_unlinkat, AT_FDCWD, path, AT_REMOVEDIR));
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

  explicit DelegatedUnit(bool subgroup = true) {
    root = tmp / "cgroup2";
    sys_mkdir(root.c_str(), 0755);
    g_root = root;
    put(root + "/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
    put(root + "/cgroup.subtree_control", "cpu io memory pids\n");
    put(root + "/cgroup.procs", "1\n");
    mkdirs(root + "/system.slice");
    put(root + "/system.slice/cgroup.subtree_control", "memory pids\n");
    unit = root + "/system.slice/corral-worker.service";
    mkdirs(unit);
    supervisor = subgroup ? unit + "/supervisor" : unit;
    if (subgroup) mkdirs(supervisor);
    put(supervisor + "/cgroup.procs", std::to_string(getpid()) + "\n");
    std::string mountinfo = "30 23 0:26 / " + root + " rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
    put(tmp / "mountinfo", mountinfo);
    put(tmp / "self_cgroup", "0::" + supervisor.substr(root.size()) + "\n");
  }
  ~DelegatedUnit() { g_root.clear(); }

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
