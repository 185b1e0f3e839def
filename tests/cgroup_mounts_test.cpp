// Where the cgroup probe learns the host's cgroup mounts, on the real kernel:
// asked of statmount(2) at the usual places, or read from the whole of
// /proc/self/mountinfo. The two must agree on every host, and the quick one
// must not be believed where the host mounts something else in a usual
// place. The probe's parsing and choices on fake trees are in
// tests/cgroup_probe_test.cpp.
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <filesystem>
#include <sstream>

#include "corral/cgroup.hpp"
#include "support.hpp"

using namespace corral;
using corral_test::TempDir;

namespace {

// The same table by another name: a probe given it reads the table instead
// of asking statmount.
constexpr const char* kTableByAnotherName = "/proc/thread-self/mountinfo";

// Everything a probe learnt from the mounts and the files under them.
std::string summary(const CgroupProbe& p) {
  std::string s = "backend " + std::string(cgroup_version_name(p.backend)) + "; v2 " +
                  (p.v2_mounted ? p.v2_mount : "-") + " own " + p.v2_own_dir + (p.v2_own_is_root ? " (root)" : "") +
                  " writable " + std::to_string(p.v2_writable) + " kill " + std::to_string(p.v2_kill) + " peak " +
                  std::to_string(p.v2_peak) + " controllers";
  for (const auto& c : p.v2_controllers) s += " " + c;
  for (const auto& h : p.v1) {
    s += "; v1";
    for (const auto& c : h.controllers) s += " " + c;
    s += " at " + h.mount_point + " own " + h.own_dir + " writable " + std::to_string(h.writable);
  }
  s += "; roles " + std::to_string(p.v1_memory) + " " + std::to_string(p.v1_pids) + " " +
       std::to_string(p.v1_cpuacct) + " " + std::to_string(p.v1_freezer) + " " + std::to_string(p.v1_devices) +
       " memsw " + std::to_string(p.v1_memsw) + "; " + p.describe();
  return s;
}

// The probe with /proc/self/cgroup replaced by `self` (a file), asked both
// ways.
struct BothWays {
  CgroupProbe quick, table;
};
BothWays probe_both_ways(const std::string& self = "/proc/self/cgroup") {
  CgroupProbeSources quick;
  quick.self_cgroup = self;
  CgroupProbeSources table = quick;
  table.mountinfo = kTableByAnotherName;
  return {probe_cgroups(quick), probe_cgroups(table)};
}

// A statmount that gives filesystem options (6.11), and a host whose
// hierarchies are where the quick path looks; else a skip that says which.
void quick_path_or_skip() {
  BothWays b = probe_both_ways();
  cr_assert_str_eq(b.table.mounts_from.c_str(), "mountinfo", "a probe given another name of the table did not read it");
  if (b.quick.mounts_from != "statmount")
    cr_skip_test("the probe reads the mount table on this host (statmount without filesystem options before "
                 "Linux 6.11, or a hierarchy away from /sys/fs/cgroup): %s",
                 b.quick.describe().c_str());
}

}  // namespace

Test(cgroup_mounts, statmount_and_the_mount_table_give_the_same_probe) {
  quick_path_or_skip();
  BothWays b = probe_both_ways();
  cr_assert_str_eq(b.quick.mounts_from.c_str(), "statmount");
  cr_assert(summary(b.quick) == summary(b.table), "statmount: %s\nthe table: %s", summary(b.quick).c_str(),
            summary(b.table).c_str());
}

// A hierarchy this process is in that is not mounted where the quick path
// looks (here a name nothing mounts): the quick path cannot say whether it
// is mounted elsewhere, so the table is read, and both ways agree.
Test(cgroup_mounts, a_hierarchy_away_from_its_usual_place_sends_the_probe_to_the_table) {
  quick_path_or_skip();
  TempDir tmp;
  const std::string self = tmp / "self_cgroup";
  corral_test::write_file(self, "15:name=corral-nowhere:/\n" + corral_test::read_file("/proc/self/cgroup"));
  BothWays b = probe_both_ways(self);
  cr_assert_str_eq(b.quick.mounts_from.c_str(), "mountinfo");
  cr_assert(summary(b.quick) == summary(b.table), "quick: %s\nthe table: %s", summary(b.quick).c_str(),
            summary(b.table).c_str());
}

// What a host can put at a usual place, in a mount namespace of the test's
// own (Criterion runs each test in a process of its own): a hierarchy's
// subtree (as Docker does without a cgroup namespace: the mount's root is
// not the hierarchy's), and another hierarchy than the one named there.
// The first must give the same own directory both ways; the second must not
// be believed.
Test(cgroup_mounts, a_subtree_or_another_hierarchy_at_a_usual_place) {
  if (geteuid() != 0) cr_skip_test("needs root: mounts in a mount namespace of the test's own");
  quick_path_or_skip();
  CgroupProbe host = probe_cgroups();
  if (host.backend != CgroupVersion::v1 || host.v1_memory < 0 || host.v1_pids < 0 ||
      host.v1[host.v1_memory].mount_point != "/sys/fs/cgroup/memory" ||
      host.v1[host.v1_pids].mount_point != "/sys/fs/cgroup/pids")
    cr_skip_test("needs v1 memory and pids at /sys/fs/cgroup/{memory,pids}: %s", host.describe().c_str());
  corral_test::enter_own_mount_namespace();

  // A subtree of memory: a group of ours, mounted over the hierarchy's root.
  const std::string own = host.v1[host.v1_memory].own_dir;
  const std::string sub = own + "/corral-mounts-test-" + std::to_string(getpid());
  cr_assert(::mkdir(sub.c_str(), 0755) == 0 || errno == EEXIST, "mkdir %s: %s", sub.c_str(), strerror(errno));
  const std::string rel = sub.substr(std::string("/sys/fs/cgroup/memory").size());  // the group, in the hierarchy
  cr_assert(::mount(sub.c_str(), "/sys/fs/cgroup/memory", nullptr, MS_BIND, nullptr) == 0, "bind: %s", strerror(errno));
  TempDir tmp;
  const std::string self = tmp / "self_cgroup";
  std::string text;
  std::istringstream lines(corral_test::read_file("/proc/self/cgroup"));
  for (std::string line; std::getline(lines, line);) {
    auto c1 = line.find(':'), c2 = line.find(':', c1 + 1);
    bool memory = line.substr(c1 + 1, c2 - c1 - 1) == "memory";
    text += memory ? line.substr(0, c2 + 1) + rel + "/inner\n" : line + "\n";
  }
  corral_test::write_file(self, text);
  BothWays b = probe_both_ways(self);
  cr_assert_str_eq(b.quick.mounts_from.c_str(), "statmount");
  cr_assert(b.quick.v1_memory >= 0, "memory not found: %s", b.quick.describe().c_str());
  cr_assert_str_eq(b.quick.v1[b.quick.v1_memory].own_dir.c_str(), "/sys/fs/cgroup/memory/inner",
                   "the mount shows the group at its root: the own directory is below the mount point");
  cr_assert(summary(b.quick) == summary(b.table), "subtree, quick: %s\nthe table: %s", summary(b.quick).c_str(),
            summary(b.table).c_str());
  (void)::umount2("/sys/fs/cgroup/memory", MNT_DETACH);
  (void)::rmdir(sub.c_str());

  // pids mounted at memory's place: the options name pids, not memory.
  cr_assert(::mount("/sys/fs/cgroup/pids", "/sys/fs/cgroup/memory", nullptr, MS_BIND, nullptr) == 0, "bind: %s",
            strerror(errno));
  b = probe_both_ways();
  cr_assert_str_eq(b.quick.mounts_from.c_str(), "mountinfo",
                   "a mount of pids at /sys/fs/cgroup/memory was taken for the memory hierarchy");
  cr_assert(summary(b.quick) == summary(b.table), "another hierarchy, quick: %s\nthe table: %s",
            summary(b.quick).c_str(), summary(b.table).c_str());
}

// A tmpfs mounted over a hierarchy (in a mount namespace of the test's
// own): the table still lists the hierarchy, and the probe took it, naming
// directories on the tmpfs as the run's cgroups. Now it is out of reach:
// the probe leaves it out and says so, and a run that needs it is refused
// naming the mount, before any cgroup file is looked for on the tmpfs.
Test(cgroup_mounts, a_tmpfs_over_a_hierarchy_leaves_it_out_of_reach) {
  if (geteuid() != 0) cr_skip_test("needs root: mounts in a mount namespace of the test's own");
  CgroupProbe host = probe_cgroups();
  if (host.backend != CgroupVersion::v1 || host.v1_memory < 0 || host.v1_pids < 0 ||
      host.v1[host.v1_memory].mount_point != "/sys/fs/cgroup/memory")
    cr_skip_test("needs v1 memory and pids, memory at /sys/fs/cgroup/memory: %s", host.describe().c_str());
  corral_test::enter_own_mount_namespace();
  cr_assert(::mount("corral-test", "/sys/fs/cgroup/memory", "tmpfs", 0, "mode=755") == 0, "tmpfs: %s",
            strerror(errno));
  // The group the probe would name, made on the tmpfs: writable, so only
  // knowing the mount is out of reach keeps the probe from taking it.
  const std::string own = host.v1[host.v1_memory].own_dir;
  std::error_code ec;
  std::filesystem::create_directories(own, ec);
  cr_assert(!ec, "mkdir %s on the tmpfs: %s", own.c_str(), ec.message().c_str());

  BothWays b = probe_both_ways();
  for (const CgroupProbe* p : {&b.quick, &b.table}) {
    cr_assert_str_eq(p->mounts_from.c_str(), "mountinfo");
    cr_assert_lt(p->v1_memory, 0, "memory under a tmpfs was taken: %s", summary(*p).c_str());
    cr_assert_geq(p->v1_pids, 0, "pids, beside it, was lost: %s", summary(*p).c_str());
    cr_assert(p->hidden_note().find("memory at /sys/fs/cgroup/memory") != std::string::npos, "%s",
              p->hidden_note().c_str());
  }
  // The CLI, in this mount namespace: a memory ceiling is refused, naming
  // the mount.
  TempDir tmp;
  const std::string cmd = corral_test::build_dir() + "/bin/corral run --tier container --limit memory_bytes=64MiB -- "
                          "/bin/true 2>" + (tmp / "err");
  const int status = std::system(cmd.c_str());
  const std::string err = corral_test::read_file(tmp / "err");
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 2, "status %d: %s", status, err.c_str());
  cr_assert(err.find("memory_bytes is not enforceable") != std::string::npos &&
                err.find("out of reach under another mount: memory at /sys/fs/cgroup/memory") != std::string::npos,
            "%s", err.c_str());
  // A run without a memory ceiling goes on with the hierarchies in reach
  // (the old probe failed every container run here, exit 125, looking for
  // memory.oom_control on the tmpfs); and nothing was made on the tmpfs,
  // as the host sees it.
  const std::string ran = corral_test::build_dir() + "/bin/corral run --tier container -- /bin/echo reached >" +
                          (tmp / "out") + " 2>" + (tmp / "err");
  const int ran_status = std::system(ran.c_str());
  cr_assert(WIFEXITED(ran_status) && WEXITSTATUS(ran_status) == 0, "status %d: %s", ran_status,
            corral_test::read_file(tmp / "err").c_str());
  cr_assert_str_eq(corral_test::read_file(tmp / "out").c_str(), "reached\n");
  const auto made = corral_test::tree_of(own);
  cr_assert(made.empty(), "the runs made %zu entries on the tmpfs under %s, the first: %s", made.size(), own.c_str(),
            made.empty() ? "" : made[0].c_str());
}
