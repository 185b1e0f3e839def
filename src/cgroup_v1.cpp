// cgroup v1 backend: one run directory in each of the memory, pids, cpuacct
// and freezer hierarchies that is mounted (a co-mounted hierarchy such as
// "cpu,cpuacct" counts once). Runs in the parent.
//
// Kernel facts it leans on (Documentation/admin-guide/cgroup-v1/):
// - memory.memsw.limit_in_bytes caps memory+swap and must be >= the memory
//   limit, so the memory limit is written first; it exists only when swap
//   accounting is on.
// - memory.oom_control: oom_kill_disable is inherited from the parent group;
//   we keep the kernel OOM killer on (a disabled one would leave the run
//   hanging in the OOM path); the oom_kill counter is there from 4.13.
// - freezer.state: FROZEN is reached asynchronously (FREEZING meanwhile);
//   frozen tasks do not act on SIGKILL until thawed, so we thaw after the
//   kill on every path.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>

#include "cgroup_backend.hpp"

namespace corral::detail {
namespace {

constexpr const char* kWho = "cgroup v1";

class V1Backend final : public CgroupBackend {
 public:
  CgroupVersion version() const noexcept override { return CgroupVersion::v1; }

  Expected<CgroupStats> stats() const override {
    if (removed) return Error(ENOENT, std::string(kWho) + ": run cgroup " + name + " was removed");
    cgroupfs::StatDirs d{dir_of(memory), dir_of(pids), dir_of(cpuacct), limit_bytes.has_value()};
    return cgroupfs::read_stats(CgroupVersion::v1, d);
  }

  Status kill_all() override {
    if (removed) return {};
    auto all = dirs();
    auto listed = count_listed(all);
    if (!listed) return std::move(listed).error();
    if (*listed == 0) return {};
    Status first;
    auto keep = [&](Status s) {
      if (first && !s) first = std::move(s);
    };
    if (freezer >= 0) {
      // Freeze so nothing forks between reading cgroup.procs and the kill.
      const std::string state = placements[freezer].dir + "/freezer.state";
      Status froze = write_text(kWho, state, "FROZEN");
      if (froze) wait_frozen(state);
      keep(std::move(froze));
      auto killed = kill_listed(kWho, all);
      if (!killed) keep(std::move(killed).error());
      keep(write_text(kWho, state, "THAWED"));  // on every path
    }
    // Without a freezer this is the whole kill; with one it catches a task
    // that was mid-fork. pids.max bounds how many can appear.
    keep(kill_until_empty(kWho, all, 5000));
    return first;
  }

  // A reusable run's groups stay for the next run (reuse_run_cgroup) only
  // when nothing of this run lingers that the next would inherit: an OOM
  // kill or a refused fork (counters that cannot be reset), a ceiling that
  // was reached, more than kReuseResidueBytes of pages still charged (a
  // file the run left on a tmpfs stays charged to the group that wrote it;
  // a removed group hands its charges to its parent), or more than
  // kReuseChargedBytes charged in all.
  bool left_for_reuse() const override {
    if (!reusable || !uncleared_counters().empty()) return false;
    if (memory < 0) return true;
    const std::string dir = placements[memory].dir;
    auto value = [&](const char* file) -> std::optional<std::uint64_t> {
      auto text = read_text(kWho, dir + "/" + file);
      return text ? cgroupfs::single_value(*text) : std::nullopt;
    };
    // usage_in_bytes also counts the kernel's own memory: what each CPU
    // keeps charged in reserve, a stack and task of each exited process
    // until an RCU grace period frees them, the dentries of every path the
    // run looked up (kept after it ends: 5,000 lookups of missing files
    // are ~1 MiB). 0.2-1 MiB after a plain /bin/sh exec on 2 CPUs here, so
    // a bound of 1 MiB on it threw clean groups away now and then. Over
    // that bound, the group's pages decide (page cache, tmpfs files,
    // anonymous memory; memory.stat); the kernel's part is bounded only by
    // kReuseChargedBytes, as the next run's peak starts from it.
    auto usage = value("memory.usage_in_bytes");
    if (!usage || *usage > kReuseChargedBytes) return false;
    if (*usage > kReuseResidueBytes) {
      auto stat = read_text(kWho, dir + "/memory.stat");
      if (!stat) return false;
      auto cache = cgroupfs::keyed_value(*stat, "total_cache");
      auto rss = cgroupfs::keyed_value(*stat, "total_rss");
      if (!cache || !rss || *cache + *rss > kReuseResidueBytes) return false;
    }
    if (!limit_bytes) return true;
    // CgroupStats::hit_ceiling against the limit this run wrote.
    const std::uint64_t slack = kOomChargePages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    auto below = [&](std::optional<std::uint64_t> peak) { return peak && *peak + slack < *limit_bytes; };
    return below(value("memory.max_usage_in_bytes")) &&
           (!swap_capped || below(value("memory.memsw.max_usage_in_bytes")));
  }

  // No freezer: kill_all() would write freezer.state of a group the rmdirs
  // may have taken already.
  bool rmdir_first() const override { return !reusable && freezer < 0 && !nested; }

  // Why the counters no reset clears say this group's run was not clean:
  // an OOM kill (or one under way), a fork pids.max refused. "" when none.
  std::string uncleared_counters() const {
    if (memory >= 0) {
      auto oom = read_text(kWho, placements[memory].dir + "/memory.oom_control");
      if (!oom) return oom.error().message();
      if (cgroupfs::keyed_value(*oom, "oom_kill").value_or(0) > 0 ||
          cgroupfs::keyed_value(*oom, "under_oom").value_or(0) > 0)
        return "an OOM kill was counted";
    }
    if (pids >= 0) {
      auto events = read_text(kWho, placements[pids].dir + "/pids.events");
      if (!events) return events.error().message();
      if (cgroupfs::keyed_value(*events, "max").value_or(0) > 0) return "a refused fork was counted";
    }
    return "";
  }

  int memory = -1, pids = -1, cpuacct = -1, freezer = -1, devices = -1;  // index into placements
  bool reusable = false;
  std::optional<std::uint64_t> limit_bytes;  // the memory ceiling written for this run

 private:
  std::string dir_of(int i) const { return i >= 0 ? placements[i].dir : std::string(); }

  static Expected<int> count_listed(const std::vector<std::string>& all) {
    int n = 0;
    for (const auto& d : all) {
      auto pids = read_procs(kWho, d);
      if (!pids) return std::move(pids).error();
      n += static_cast<int>(pids->size());
    }
    return n;
  }

  // Bounded: a task stuck in an uninterruptible sleep can keep the group in
  // FREEZING; the kill loop after the thaw still ends it.
  static void wait_frozen(const std::string& state) {
    const long long deadline = now_ms() + 1000;
    while (now_ms() < deadline) {
      auto text = read_text(kWho, state);
      if (!text || text->rfind("FROZEN", 0) == 0) return;
      sleep_ms(1);
    }
  }
};

}  // namespace

namespace {

Status require_controllers(const CgroupProbe& probe, const CgroupSpec& spec) {
  auto require = [&](const char* what, const char* controller, int h) -> Status {
    if (h < 0)
      return Error(ENOTSUP, std::string(kWho) + ": " + what + " needs the " + controller +
                                " controller, and no v1 hierarchy carries it");
    if (!probe.v1[h].writable)
      return Error(EACCES, std::string(kWho) + ": " + what + " needs a " + controller + " group under " +
                               probe.v1[h].own_dir + ", which is not writable (not root, not delegated)");
    return {};
  };
  if (spec.memory_bytes)
    if (Status s = require("memory_bytes", "memory", probe.v1_memory); !s) return s;
  if (spec.pids_max)
    if (Status s = require("pids_max", "pids", probe.v1_pids); !s) return s;
  if (spec.devices)
    if (Status s = require("devices", "devices", probe.v1_devices); !s) return s;
  return {};
}

// The hierarchies the run joins, one run directory per distinct one (a
// co-mounted hierarchy counts once); the roles point at them. Returns the
// probe's hierarchy index of each placement to come.
std::vector<int> assign_roles(const CgroupProbe& probe, const CgroupSpec& spec, V1Backend& b) {
  auto usable = [&](int h) { return h >= 0 && probe.v1[h].writable; };
  std::vector<int> hierarchies;
  int* role_slot[] = {&b.memory, &b.pids, &b.cpuacct, &b.freezer, &b.devices};
  int role_h[] = {probe.v1_memory, (spec.pids_max || spec.pids_accounting) ? probe.v1_pids : -1,
                  spec.cpu_accounting ? probe.v1_cpuacct : -1, spec.freezer_kill ? probe.v1_freezer : -1,
                  spec.devices ? probe.v1_devices : -1};
  for (int r = 0; r < 5; ++r) {
    if (!usable(role_h[r])) continue;
    auto it = std::find(hierarchies.begin(), hierarchies.end(), role_h[r]);
    if (it == hierarchies.end()) it = hierarchies.insert(hierarchies.end(), role_h[r]);
    *role_slot[r] = static_cast<int>(it - hierarchies.begin());
  }
  return hierarchies;
}

Placement placement_in(const CgroupV1Hierarchy& hier, const CgroupSpec& spec, const std::string& name) {
  Placement p;
  p.base = spec.under_hierarchy_root ? hier.mount_point : hier.own_dir;
  p.parent = p.base + "/" + spec.parent;
  p.dir = p.parent + "/" + name;
  return p;
}

// memory.memsw.limit_in_bytes must stay >= memory.limit_in_bytes at every
// step: going down the memory limit is written first, going up (a reused
// group that had a lower one) memsw first, which the kernel's EINVAL for
// the memory write says.
Status write_memory_limit(const std::string& dir, const std::string& value, bool memsw) {
  Status s = write_text(kWho, dir + "/memory.limit_in_bytes", value);
  if (!memsw) return s;
  if (s) return write_text(kWho, dir + "/memory.memsw.limit_in_bytes", value);
  if (s.error().code() != EINVAL) return s;
  if (Status m = write_text(kWho, dir + "/memory.memsw.limit_in_bytes", value); !m) return m;
  return write_text(kWho, dir + "/memory.limit_in_bytes", value);
}

Status write_pids_max(V1Backend& b, const CgroupSpec& spec, bool reused, std::vector<std::string>& in_force) {
  if (b.pids >= 0 && (spec.pids_max || reused)) {
    const std::string value = spec.pids_max ? std::to_string(*spec.pids_max) : "max";
    if (Status s = write_text(kWho, b.placements[b.pids].dir + "/pids.max", value); !s) return s;
    if (spec.pids_max) in_force.push_back("pids.max=" + value);
  }
  return {};
}

// The ceilings into the run's groups; `reused`: a group that had another
// run's (an absent ceiling is written as none). Appends what is in force.
Status write_ceilings(const CgroupProbe& probe, V1Backend& b, const CgroupSpec& spec, bool reused,
                      std::vector<std::string>& in_force) {
  if (b.memory >= 0) {
    const std::string dir = b.placements[b.memory].dir;
    // Swap accounting is the host's (a boot option): the probe saw it in
    // our own memory group, so every group has the file or none does.
    const bool memsw = probe.v1_memsw;
    if (spec.memory_bytes || reused) {
      const std::string value = spec.memory_bytes ? std::to_string(*spec.memory_bytes) : "-1";
      // A reused group whose limit is already the one wanted (memsw is
      // always written with it) keeps it: one read instead of two writes.
      bool same = false;
      if (reused)
        if (auto text = read_text(kWho, dir + "/memory.limit_in_bytes"))
          if (auto now = parse_u64(*text))
            same = spec.memory_bytes ? *now == *spec.memory_bytes : *now >= (std::uint64_t{1} << 62);
      if (!same)
        if (Status s = write_memory_limit(dir, value, memsw); !s) return s;
    }
    b.limit_bytes = spec.memory_bytes;
    if (spec.memory_bytes) {
      const std::string value = std::to_string(*spec.memory_bytes);
      in_force.push_back("memory.limit_in_bytes=" + value);
      if (memsw) {
        in_force.push_back("memory.memsw.limit_in_bytes=" + value);
        b.swap_capped = true;
      } else {
        in_force.push_back("swap not capped (no memory.memsw.limit_in_bytes: swap accounting off)");
      }
    }
    // Written only when inherited as disabled: the write itself is one of
    // the v1 knobs newer kernels warn about. A reused group had it checked
    // when it was made.
    if (reused) return write_pids_max(b, spec, reused, in_force);
    auto oom = read_text(kWho, dir + "/memory.oom_control");
    if (!oom) return std::move(oom).error();
    if (cgroupfs::keyed_value(*oom, "oom_kill_disable").value_or(0) != 0)
      if (Status s = write_text(kWho, dir + "/memory.oom_control", "0"); !s) return s;
  }
  return write_pids_max(b, spec, reused, in_force);
}

// The child joins through `tasks`, not cgroup.procs. Writing "0" to
// cgroup.procs takes the global cgroup_threadgroup_rwsem for writing, and
// on a kernel without favordynmods that waits for an RCU grace period:
// 5-13 ms per run on this 2-CPU host. A single-thread move of the writer
// itself ("0" into tasks) skips that lock (kernel/cgroup/cgroup.c,
// cgroup_procs_write_start) and costs ~20 us. The joiner is a freshly
// cloned, single-threaded child, so moving its one thread moves all of it.
Status open_join_fds(V1Backend& b) {
  for (const auto& p : b.placements) {
    auto fd = open_join_file(kWho, p.dir, "tasks");
    if (!fd) return std::move(fd).error();
    b.join_fds.push_back(std::move(*fd));
  }
  return {};
}

void describe(V1Backend& b, const std::vector<std::string>& in_force) {
  b.description = in_force.empty() ? "accounting only" : "";
  for (const auto& s : in_force) b.description += (b.description.empty() ? "" : ", ") + s;
}

}  // namespace

Expected<std::unique_ptr<CgroupBackend>> create_v1(const CgroupProbe& probe, const CgroupSpec& spec,
                                                   const std::string& name) {
  if (Status s = require_controllers(probe, spec); !s) return std::move(s).error();
  auto b = std::make_unique<V1Backend>();
  b->name = name;
  b->reusable = spec.reusable && !spec.devices;
  // From here on every failure removes what was made.
  auto fail = [&](Error e) -> Error {
    b->reusable = false;
    (void)b->remove();
    return e;
  };

  for (int h : assign_roles(probe, spec, *b)) {
    Placement p = placement_in(probe.v1[h], spec, name);
    // The parent is kept, but an operator (or an older corral) may remove it
    // between our steps: ENOENT means make it again.
    // The run's directory first: the parent is there on every run but a
    // host's first, so making it (an EEXIST mkdir per hierarchy) waits for
    // the ENOENT that says it is missing.
    Status made = make_dir(kWho, p.dir, false);
    for (int attempt = 0; attempt < 5 && !made && made.error().code() == ENOENT; ++attempt) {
      made = make_parent_chain(kWho, p.base, spec.parent, [](const std::string&) { return Status{}; });
      if (made) made = make_dir(kWho, p.dir, false);
    }
    if (!made) return fail(std::move(made).error());
    b->placements.push_back(std::move(p));
  }
  if (b->reusable && !b->placements.empty()) {
    // Held from the start (reuse_v1 takes only a group nobody holds).
    const std::string& first = b->placements.front().dir;
    b->hold.reset(::open(first.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!b->hold || ::flock(b->hold.get(), LOCK_EX) != 0)
      return fail(Error::from_errno(errno, std::string(kWho) + ": hold " + first));
  }

  std::vector<std::string> in_force;
  if (Status s = write_ceilings(probe, *b, spec, false, in_force); !s) return fail(std::move(s).error());
  if (b->devices >= 0 && spec.devices) {
    // Deny all first (a new group inherits its parent's list), then allow
    // each rule; the kernel checks at open(2) of a device node.
    const std::string dir = b->placements[b->devices].dir;
    if (Status s = write_text(kWho, dir + "/devices.deny", "a"); !s) return fail(std::move(s).error());
    std::string allowed;
    for (const auto& d : *spec.devices) {
      std::string rule = std::string(1, d.type) + " " + std::to_string(d.major) + ":" +
                         (d.minor < 0 ? std::string("*") : std::to_string(d.minor)) + " rwm";
      if (Status s = write_text(kWho, dir + "/devices.allow", rule); !s) return fail(std::move(s).error());
      allowed += (allowed.empty() ? "" : ",") + rule.substr(0, rule.size() - 4);
    }
    in_force.push_back("devices.allow=" + (allowed.empty() ? std::string("none") : allowed));
  }
  if (Status s = open_join_fds(*b); !s) return fail(std::move(s).error());
  describe(*b, in_force);
  return std::unique_ptr<CgroupBackend>(std::move(b));
}

Expected<std::unique_ptr<CgroupBackend>> reuse_v1(const CgroupProbe& probe, const CgroupSpec& spec,
                                                  const std::string& name) {
  if (spec.devices) return Error(ENOTSUP, std::string(kWho) + ": a group with device rules is not reused");
  if (Status s = require_controllers(probe, spec); !s) return std::move(s).error();
  auto b = std::make_unique<V1Backend>();
  b->name = name;
  b->reusable = true;
  for (int h : assign_roles(probe, spec, *b)) b->placements.push_back(placement_in(probe.v1[h], spec, name));
  if (b->placements.empty()) return Error(ENOENT, std::string(kWho) + ": no hierarchy to reuse " + name + " in");
  // Held (LOCK_EX on the first directory) by whoever holds the group: a
  // group another run holds is not ours; nobody else takes this one now.
  const std::string first = b->placements.front().dir;
  b->hold.reset(::open(first.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!b->hold) return Error::from_errno(errno, std::string(kWho) + ": open " + first + " to reuse it");
  if (::flock(b->hold.get(), LOCK_EX | LOCK_NB) != 0)
    return Error(EAGAIN, std::string(kWho) + ": " + first + " is held by another run");
  // A group unfit for reuse is removed here, while we hold it (its
  // processes killed): EBUSY saying why.
  auto unfit = [&](const std::string& why) {
    b->reusable = false;
    Status gone = b->remove();
    return Error(EBUSY, std::string(kWho) + ": " + name + " not reused (" + why + ")" +
                            (gone ? std::string() : "; its removal: " + gone.error().message()));
  };
  // Each directory is there (a missing one fails its join fd's open below)
  // and empty (a vanished one reads as empty).
  for (const auto& p : b->placements) {
    auto procs = read_procs(kWho, p.dir);
    if (!procs) return unfit(procs.error().message());
    if (!procs->empty()) return unfit("processes are left in it");
  }
  // The counters that cannot be reset must be zero; the rest start again.
  if (std::string why = b->uncleared_counters(); !why.empty()) {
    // Gone while we opened it (a sweep removed it): nothing to reuse.
    if (!file_exists(first + "/tasks")) return Error(ENOENT, std::string(kWho) + ": " + first + " is gone");
    return unfit(why);
  }
  std::vector<std::string> in_force;
  if (Status s = write_ceilings(probe, *b, spec, true, in_force); !s) return unfit(s.error().message());
  if (b->memory >= 0) {
    const std::string dir = b->placements[b->memory].dir;
    // "0" resets a high-water mark to the current usage (the failcnts are
    // not read: CgroupStats::hit_ceiling says why).
    std::vector<const char*> reset{"memory.max_usage_in_bytes"};
    if (b->swap_capped || file_exists(dir + "/memory.memsw.max_usage_in_bytes"))
      reset.push_back("memory.memsw.max_usage_in_bytes");
    for (const char* f : reset)
      if (Status s = write_text(kWho, dir + "/" + f, "0"); !s) return unfit(s.error().message());
  }
  if (b->cpuacct >= 0)
    if (Status s = write_text(kWho, b->placements[b->cpuacct].dir + "/cpuacct.usage", "0"); !s)
      return unfit(s.error().message());
  if (Status s = open_join_fds(*b); !s) return unfit(s.error().message());
  describe(*b, in_force);
  return std::unique_ptr<CgroupBackend>(std::move(b));
}

}  // namespace corral::detail
