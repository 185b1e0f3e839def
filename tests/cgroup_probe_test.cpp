// The cgroup module's pure parts, on fake trees under a TempDir: mountinfo and
// /proc/self/cgroup parsing, backend choice, the file formats of memory.events,
// memory.oom_control, cpu.stat, cgroup.controllers, and spec validation.
// No kernel cgroup is touched here; tests/cgroup_test.cpp does that.
#include <filesystem>
#include <initializer_list>

#include "corral/cgroup.hpp"
#include "support.hpp"

using namespace corral;
using corral_test::TempDir;

namespace {

// A fake host: a mountinfo file naming directories under a TempDir, a fake
// /proc/self/cgroup, and whatever cgroupfs files a test writes.
class FakeHost {
 public:
  std::string dir(const std::string& rel) const { return tmp_ / rel; }

  // A line of the table; returns its number. `on`: the number of the line
  // of the mount this one is made on (its parent); 0, the host's root
  // filesystem (id 23, not listed).
  int mount(const std::string& rel, const std::string& fstype, const std::string& super_opts,
            const std::string& root = "/", int on = 0) {
    std::filesystem::create_directories(dir(rel));
    std::string point = dir(rel);
    std::string escaped;
    for (char c : point) escaped += c == ' ' ? std::string("\\040") : std::string(1, c);
    ++lines_;
    mountinfo_ += std::to_string(30 + lines_) + " " + std::to_string(on ? 30 + on : 23) + " 0:" +
                  std::to_string(40 + lines_) + " " + root + " " + escaped +
                  " rw,nosuid,nodev,noexec,relatime shared:9 - " + fstype + " " + fstype + " " + super_opts + "\n";
    return lines_;
  }
  void file(const std::string& rel, const std::string& content) {
    std::filesystem::create_directories(std::filesystem::path(dir(rel)).parent_path());
    corral_test::write_file(dir(rel), content);
  }
  CgroupProbe probe(const std::string& self_cgroup, const std::string& release = "6.1.0") {
    corral_test::write_file(tmp_ / "mountinfo", mountinfo_);
    corral_test::write_file(tmp_ / "self_cgroup", self_cgroup);
    return probe_cgroups({tmp_ / "mountinfo", tmp_ / "self_cgroup", release});
  }

 private:
  TempDir tmp_;
  std::string mountinfo_;
  int lines_ = 0;
};

bool mentions(const std::string& text, std::initializer_list<const char*> parts) {
  for (const char* p : parts)
    if (text.find(p) == std::string::npos) return false;
  return true;
}

#define ASSERT_MENTIONS(text, ...)                                                    \
  do {                                                                                \
    std::string t_ = (text);                                                          \
    cr_assert(mentions(t_, {__VA_ARGS__}), "'%s' lacks one of: %s", t_.c_str(), #__VA_ARGS__); \
  } while (0)

#define ASSERT_SAME(a, b)                                                      \
  do {                                                                         \
    std::string a_ = (a), b_ = (b);                                            \
    cr_assert(a_ == b_, "%s is '%s', expected '%s'", #a, a_.c_str(), b_.c_str()); \
  } while (0)

// The layout of the host corral is developed on: memory, pids, cpu+cpuacct,
// freezer on v1; v2 mounted with hugetlb only.
void make_hybrid(FakeHost& h) {
  h.mount("cg/cpu,cpuacct", "cgroup", "rw,cpu,cpuacct");
  h.mount("cg/memory", "cgroup", "rw,memory");
  h.mount("cg/freezer", "cgroup", "rw,freezer");
  h.mount("cg/pids", "cgroup", "rw,pids");
  h.mount("cg/systemd", "cgroup", "rw,xattr,name=systemd");
  h.mount("cg/unified", "cgroup2", "rw,nsdelegate");
  h.file("cg/unified/cgroup.controllers", "hugetlb\n");
  h.file("cg/memory/process_api/abc/memory.memsw.limit_in_bytes", "9223372036854771712\n");
}
const char* kHybridSelf =
    "9:name=systemd:/\n8:pids:/\n6:freezer:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/\n0::/\n";

Expected<RunCgroup> create_with(const CgroupSpec& spec, std::string_view name = "t") {
  CgroupProbe none;  // backend none: validation must answer before the kernel is asked
  none.why_none = "test";
  return create_run_cgroup(none, spec, name);
}

}  // namespace

// ---------------------------------------------------------------- probe

Test(cgroup_probe, hybrid_host_chooses_v1_and_maps_each_role) {
  FakeHost h;
  make_hybrid(h);
  auto p = h.probe(kHybridSelf);
  cr_assert_eq(p.backend, CgroupVersion::v1, "%s", p.describe().c_str());
  ASSERT_SAME(p.v1[p.v1_memory].own_dir, h.dir("cg/memory/process_api/abc"));
  ASSERT_SAME(p.v1[p.v1_pids].own_dir, h.dir("cg/pids"));
  // cpuacct shares a hierarchy with cpu: one directory, found by either name.
  ASSERT_SAME(p.v1[p.v1_cpuacct].mount_point, h.dir("cg/cpu,cpuacct"));
  cr_assert_eq(p.v1[p.v1_cpuacct].controllers.size(), 2u);
  cr_assert(p.v1_memsw);
  cr_assert(p.has("memory") && p.has("pids") && p.has("cpu") && p.has("freezer"));
  cr_assert(p.v2_own_is_root);
  cr_assert_eq(p.v2_controllers, std::vector<std::string>{"hugetlb"});
  ASSERT_MENTIONS(p.describe(), "cgroup v1: memory,pids,cpuacct,freezer", "swap capped",
                  "group kill: freezer", "hugetlb only (unused)");
}

Test(cgroup_probe, pure_v2_host_reads_features_from_our_cgroup) {
  FakeHost h;
  h.mount("cg", "cgroup2", "rw,nsdelegate,memory_recursiveprot");
  const std::string own = "cg/user.slice/app.scope";
  h.file(own + "/cgroup.controllers", "cpu io memory pids\n");
  h.file(own + "/cgroup.freeze", "0\n");
  h.file(own + "/memory.peak", "0\n");
  auto p = h.probe("0::/user.slice/app.scope\n");
  cr_assert_eq(p.backend, CgroupVersion::v2);
  ASSERT_SAME(p.v2_own_dir, h.dir(own));
  cr_assert(!p.v2_own_is_root);
  cr_assert_eq(p.v2_controllers.size(), 4u);
  // No cgroup.kill file in a non-root cgroup means an older kernel.
  cr_assert(!p.v2_kill);
  cr_assert(p.v2_freeze && p.v2_peak);
  ASSERT_MENTIONS(p.describe(), "cgroup v2 at", "memory,pids", "freeze+kill", "memory.peak: yes");
  h.file(own + "/cgroup.kill", "");
  p = h.probe("0::/user.slice/app.scope\n");
  cr_assert(p.v2_kill);
  ASSERT_MENTIONS(p.describe(), "group kill: cgroup.kill");
}

Test(cgroup_probe, root_cgroup_features_come_from_the_kernel_version) {
  FakeHost h;
  h.mount("cg", "cgroup2", "rw");
  h.file("cg/cgroup.controllers", "memory pids\n");
  auto old = h.probe("0::/\n", "5.10.0-20-amd64");
  cr_assert(old.v2_own_is_root);
  cr_assert(!old.v2_kill && old.v2_freeze && !old.v2_peak);
  auto recent = h.probe("0::/\n", "5.19.0");
  cr_assert(recent.v2_kill && recent.v2_freeze && recent.v2_peak);
  auto ancient = h.probe("0::/\n", "4.19.0");
  cr_assert(!ancient.v2_kill && !ancient.v2_freeze);
}

Test(cgroup_probe, mount_root_inside_the_hierarchy) {
  // A container sees a subtree mounted at its own root (mount root /docker/c1).
  FakeHost h;
  h.mount("cg/memory", "cgroup", "rw,memory", "/docker/c1");
  h.mount("cg/unified", "cgroup2", "rw", "/kube/x");
  h.file("cg/memory/sub/cgroup.procs", "");
  auto p = h.probe("4:memory:/docker/c1/sub\n0::/elsewhere\n");
  ASSERT_SAME(p.v1[p.v1_memory].own_dir, h.dir("cg/memory/sub"));
  cr_assert(p.v2_mounted);
  ASSERT_SAME(p.v2_own_dir, "");  // our v2 cgroup is outside the mount
  cr_assert_eq(p.backend, CgroupVersion::v1);
  cr_assert(!p.has("pids"));
  auto at_root = h.probe("4:memory:/docker/c1\n");
  ASSERT_SAME(at_root.v1[at_root.v1_memory].own_dir, h.dir("cg/memory"));
}

// A mount over a hierarchy's mount point hides the one below: the table
// lists both, the one on top later, and only the top one is a way in (here
// a subtree of the hierarchy mounted over its root, as a runtime may do).
// The probe that took the first one named a directory that the mount on top
// hides: /docker/c1/inner under the hierarchy's root.
Test(cgroup_probe, a_mount_over_a_hierarchy_hides_the_one_below) {
  FakeHost h;
  int memory = h.mount("cg/memory", "cgroup", "rw,memory");
  h.mount("cg/memory", "cgroup", "rw,memory", "/docker/c1", memory);
  auto p = h.probe("4:memory:/docker/c1/inner\n");
  cr_assert(p.v1_memory >= 0);
  ASSERT_SAME(p.v1[p.v1_memory].own_dir, h.dir("cg/memory/inner"));
  cr_assert_eq(p.v1.size(), 1u, "the hidden mount was listed: %zu hierarchies", p.v1.size());
  ASSERT_SAME(p.mounts_from, "mountinfo");
  cr_assert_eq(p.hidden_mounts.size(), 1u);
  ASSERT_SAME(p.hidden_mounts[0], "memory at " + h.dir("cg/memory"));
}

// Any mount hides a hierarchy, not only another cgroup's: a tmpfs over its
// mount point, or over the directory above it after it was mounted there.
// The probe listed them as the hierarchies and named directories on the
// tmpfs; now they are out of reach, and the messages say so.
Test(cgroup_probe, a_tmpfs_over_a_hierarchy_or_above_it_hides_it) {
  {
    FakeHost h;
    int memory = h.mount("cg/memory", "cgroup", "rw,memory");
    h.mount("cg/pids", "cgroup", "rw,pids");
    h.mount("cg/memory", "tmpfs", "rw", "/", memory);
    auto p = h.probe("5:memory:/\n4:pids:/\n");
    cr_assert_lt(p.v1_memory, 0, "memory under a tmpfs was taken: %s", p.describe().c_str());
    cr_assert_geq(p.v1_pids, 0, "pids, beside it, was lost");
    cr_assert_eq(p.backend, CgroupVersion::v1);
    cr_assert(!p.has("memory") && p.has("pids"));
    ASSERT_SAME(p.hidden_note(), "out of reach under another mount: memory at " + h.dir("cg/memory"));
  }
  {
    FakeHost h;
    h.mount("cg/memory", "cgroup", "rw,memory");
    h.mount("cg/pids", "cgroup", "rw,pids");
    h.mount("cg", "tmpfs", "rw");  // over /sys/fs/cgroup, after the hierarchies below it
    auto p = h.probe("5:memory:/\n4:pids:/\n");
    cr_assert_eq(p.backend, CgroupVersion::none, "%s", p.describe().c_str());
    ASSERT_MENTIONS(p.why_none, "out of reach under another mount: memory at ", "pids at ");
    ASSERT_MENTIONS(p.describe(), "cgroup: none", "out of reach under another mount");
  }
  {
    // A v1 host as systemd makes it: the tmpfs first, the hierarchies on
    // it. Nothing is hidden.
    FakeHost h;
    int tmpfs = h.mount("cg", "tmpfs", "rw");
    h.mount("cg/memory", "cgroup", "rw,memory", "/", tmpfs);
    auto p = h.probe("5:memory:/\n");
    cr_assert_geq(p.v1_memory, 0, "%s", p.describe().c_str());
    cr_assert(p.hidden_mounts.empty());
  }
  {
    // The tmpfs the hierarchy is on covered by another: hidden with it.
    FakeHost h;
    int tmpfs = h.mount("cg", "tmpfs", "rw");
    h.mount("cg/memory", "cgroup", "rw,memory", "/", tmpfs);
    h.mount("cg", "tmpfs", "rw", "/", tmpfs);
    auto p = h.probe("5:memory:/\n");
    cr_assert_lt(p.v1_memory, 0, "%s", p.describe().c_str());
  }
  {
    // v2, and a tmpfs over it.
    FakeHost h;
    int v2 = h.mount("cg", "cgroup2", "rw");
    h.file("cg/cgroup.controllers", "memory pids\n");
    h.mount("cg", "tmpfs", "rw", "/", v2);
    auto p = h.probe("0::/\n");
    cr_assert_eq(p.backend, CgroupVersion::none, "%s", p.describe().c_str());
    ASSERT_MENTIONS(p.why_none, "no cgroup2 mount", "out of reach under another mount: cgroup2 at ");
  }
}

Test(cgroup_probe, escaped_mount_point) {
  FakeHost h;
  h.mount("with space", "cgroup2", "rw");
  h.file("with space/cgroup.controllers", "pids\n");
  auto p = h.probe("0::/\n");
  ASSERT_SAME(p.v2_mount, h.dir("with space"));
  cr_assert_eq(p.backend, CgroupVersion::v2);
  cr_assert(p.has("pids") && !p.has("memory"));
}

Test(cgroup_probe, nothing_mounted_says_why_and_create_refuses) {
  FakeHost h;
  auto p = h.probe("0::/\n");
  cr_assert_eq(p.backend, CgroupVersion::none);
  ASSERT_MENTIONS(p.why_none, "no cgroup2 mount", "no v1 memory or pids hierarchy");
  ASSERT_MENTIONS(p.describe(), "cgroup: none");
  auto r = create_run_cgroup(p, CgroupSpec{}, "x");
  cr_assert(!r.ok());
  ASSERT_MENTIONS(r.error().message(), "no usable cgroup hierarchy", "no cgroup2 mount");
}

Test(cgroup_probe, v2_with_no_resource_controllers_still_gives_kill_and_cpu) {
  FakeHost h;
  h.mount("cg", "cgroup2", "rw");
  h.file("cg/cgroup.controllers", "\n");
  auto p = h.probe("0::/\n");
  cr_assert_eq(p.backend, CgroupVersion::v2);
  cr_assert(p.has("cpu") && !p.has("memory") && !p.has("pids"));
  ASSERT_MENTIONS(p.describe(), "no controllers");
}

// ---------------------------------------------------------------- file formats

Test(cgroup_files, keyed_values_match_whole_keys) {
  const std::string events = "low 0\nhigh 4\nmax 12\noom 3\noom_kill 2\noom_group_kill 1\n";
  cr_assert_eq(cgroupfs::keyed_value(events, "oom"), 3u);
  cr_assert_eq(cgroupfs::keyed_value(events, "oom_kill"), 2u);
  cr_assert_eq(cgroupfs::keyed_value(events, "oom_group_kill"), 1u);
  cr_assert(!cgroupfs::keyed_value(events, "oom_").has_value());
  cr_assert(!cgroupfs::keyed_value(events, "swap").has_value());
  const std::string oom_control = "oom_kill_disable 1\nunder_oom 0\noom_kill 5\n";
  cr_assert_eq(cgroupfs::keyed_value(oom_control, "oom_kill"), 5u);
  cr_assert_eq(cgroupfs::keyed_value(oom_control, "oom_kill_disable"), 1u);
  cr_assert(!cgroupfs::keyed_value("oom_kill many\n", "oom_kill").has_value());
  cr_assert(!cgroupfs::keyed_value("", "oom_kill").has_value());
}

Test(cgroup_files, controller_lists_and_single_values) {
  cr_assert_eq(cgroupfs::word_list("cpuset cpu io memory hugetlb pids rdma misc\n").size(), 8u);
  cr_assert(cgroupfs::word_list("\n").empty());
  cr_assert_eq(cgroupfs::word_list("  memory   pids "), (std::vector<std::string>{"memory", "pids"}));
  cr_assert_eq(cgroupfs::single_value("max\n"), UINT64_MAX);
  cr_assert_eq(cgroupfs::single_value("67108864\n"), 67108864u);
  cr_assert(!cgroupfs::single_value("12a\n").has_value());
  cr_assert(!cgroupfs::single_value("-1\n").has_value());
  cr_assert(!cgroupfs::single_value("").has_value());
}

Test(cgroup_files, v2_stats_from_a_fake_run_directory) {
  TempDir t;
  corral_test::write_file(t / "memory.events", "low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\noom_group_kill 1\n");
  corral_test::write_file(t / "memory.peak", "67100672\n");
  corral_test::write_file(t / "cpu.stat", "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n");
  corral_test::write_file(t / "pids.current", "3\n");
  corral_test::write_file(t / "pids.events", "max 4\n");
  auto st = cgroupfs::read_stats(CgroupVersion::v2, {t.path(), t.path(), t.path()});
  cr_assert(st.ok(), "%s", st.error().message().c_str());
  cr_assert(st->oom_killed());
  cr_assert_eq(st->oom_kills, 1u);
  cr_assert_eq(st->memory_peak_bytes, 67100672u);
  cr_assert_eq(st->cpu_usage_ns, 1500000u);
  cr_assert_eq(st->pids_current, 3u);
  cr_assert_eq(st->pids_limit_hits, 4u);
}

Test(cgroup_files, v1_stats_from_fake_hierarchy_directories) {
  TempDir t;
  std::filesystem::create_directories(t / "memory");
  std::filesystem::create_directories(t / "pids");
  std::filesystem::create_directories(t / "cpuacct");
  corral_test::write_file(t / "memory/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
  corral_test::write_file(t / "memory/memory.max_usage_in_bytes", "4141056\n");
  corral_test::write_file(t / "cpuacct/cpuacct.usage", "2797249\n");
  corral_test::write_file(t / "pids/pids.current", "0\n");
  corral_test::write_file(t / "pids/pids.events", "max 0\n");
  auto st = cgroupfs::read_stats(CgroupVersion::v1, {t / "memory", t / "pids", t / "cpuacct"});
  cr_assert(st.ok(), "%s", st.error().message().c_str());
  cr_assert(!st->oom_killed());
  cr_assert_eq(st->oom_kills, 0u);
  cr_assert_eq(st->memory_peak_bytes, 4141056u);
  cr_assert_eq(st->cpu_usage_ns, 2797249u);
  cr_assert_eq(st->pids_current, 0u);
}

Test(cgroup_files, missing_files_are_absent_values) {
  TempDir t;
  auto st = cgroupfs::read_stats(CgroupVersion::v2, {t.path(), "", t.path()});
  cr_assert(st.ok(), "%s", st.error().message().c_str());
  cr_assert(!st->oom_kills && !st->memory_peak_bytes && !st->cpu_usage_ns && !st->pids_current);
  cr_assert(!st->oom_killed());
}

Test(cgroup_files, a_file_that_does_not_parse_is_named) {
  TempDir t;
  corral_test::write_file(t / "memory.peak", "lots\n");
  auto st = cgroupfs::read_stats(CgroupVersion::v2, {t.path(), t.path(), t.path()});
  cr_assert(!st.ok());
  ASSERT_MENTIONS(st.error().message(), "cgroup v2", "memory.peak", "'lots'");
  TempDir u;
  corral_test::write_file(u / "cpuacct.usage", "\n");
  auto v1 = cgroupfs::read_stats(CgroupVersion::v1, {"", "", u.path()});
  cr_assert(!v1.ok());
  ASSERT_MENTIONS(v1.error().message(), "cgroup v1", "cpuacct.usage");
}

// ---------------------------------------------------------------- validation

Test(cgroup_spec, bad_run_names_are_named) {
  for (const char* bad : {"a/b", "..", "sp ace", "new\nline"}) {
    auto r = create_with(CgroupSpec{}, bad);
    cr_assert(!r.ok(), "accepted run name '%s'", bad);
    cr_assert_eq(r.error().code(), EINVAL);
    ASSERT_MENTIONS(r.error().message(), "run name", bad);
  }
  auto long_name = create_with(CgroupSpec{}, std::string(65, 'a'));
  cr_assert(!long_name.ok());
  ASSERT_MENTIONS(long_name.error().message(), "at most 64");
  // A clean name passes validation and reaches the backend check.
  auto fine = create_with(CgroupSpec{}, "build_42.x-y");
  ASSERT_MENTIONS(fine.error().message(), "no usable cgroup hierarchy");
}

Test(cgroup_spec, bad_parent_groups_are_named) {
  for (const char* bad : {"", "../x", "/abs", "a//b", "a/./b", "a/", "a b"}) {
    CgroupSpec spec;
    spec.parent = bad;
    auto r = create_with(spec);
    cr_assert(!r.ok(), "accepted parent '%s'", bad);
    ASSERT_MENTIONS(r.error().message(), "parent group");
  }
  CgroupSpec nested;
  nested.parent = "corral/batch-1";
  ASSERT_MENTIONS(create_with(nested).error().message(), "no usable cgroup hierarchy");
}

Test(cgroup_spec, zero_and_huge_ceilings_are_refused) {
  CgroupSpec mem;
  mem.memory_bytes = 0;
  ASSERT_MENTIONS(create_with(mem).error().message(), "memory_bytes must be at least 1");
  CgroupSpec pids;
  pids.pids_max = 0;
  ASSERT_MENTIONS(create_with(pids).error().message(), "pids_max must be at least 1");
  CgroupSpec huge;
  huge.memory_bytes = std::uint64_t{1} << 63;
  auto r = create_with(huge);
  cr_assert_eq(r.error().code(), ERANGE);
  ASSERT_MENTIONS(r.error().message(), "memory_bytes", "too large");
}

Test(cgroup_spec, sweep_validates_its_spec_too) {
  CgroupProbe none;
  CgroupSpec spec;
  spec.parent = "..";
  auto r = sweep_stale_run_cgroups(none, spec);
  cr_assert(!r.ok());
  ASSERT_MENTIONS(r.error().message(), "parent group");
  auto empty = sweep_stale_run_cgroups(none, CgroupSpec{});
  cr_assert(empty.ok() && *empty == 0);
}
