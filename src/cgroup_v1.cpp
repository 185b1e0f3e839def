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
    cgroupfs::StatDirs d{dir_of(memory), dir_of(pids), dir_of(cpuacct)};
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

  int memory = -1, pids = -1, cpuacct = -1, freezer = -1, devices = -1;  // index into placements

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

Expected<std::unique_ptr<CgroupBackend>> create_v1(const CgroupProbe& probe, const CgroupSpec& spec,
                                                   const std::string& name) {
  auto usable = [&](int h) { return h >= 0 && probe.v1[h].writable; };
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
    if (Status s = require("memory_bytes", "memory", probe.v1_memory); !s) return std::move(s).error();
  if (spec.pids_max)
    if (Status s = require("pids_max", "pids", probe.v1_pids); !s) return std::move(s).error();
  if (spec.devices)
    if (Status s = require("devices", "devices", probe.v1_devices); !s) return std::move(s).error();

  auto b = std::make_unique<V1Backend>();
  b->name = name;
  // From here on every failure removes what was made.
  auto fail = [&](Error e) -> Error {
    (void)b->remove();
    return e;
  };

  // One run directory per distinct hierarchy; the roles point at it.
  std::vector<int> hierarchies;
  int* role_slot[] = {&b->memory, &b->pids, &b->cpuacct, &b->freezer, &b->devices};
  int role_h[] = {probe.v1_memory, (spec.pids_max || spec.pids_accounting) ? probe.v1_pids : -1,
                  spec.cpu_accounting ? probe.v1_cpuacct : -1, spec.freezer_kill ? probe.v1_freezer : -1,
                  spec.devices ? probe.v1_devices : -1};
  for (int r = 0; r < 5; ++r) {
    if (!usable(role_h[r])) continue;
    auto it = std::find(hierarchies.begin(), hierarchies.end(), role_h[r]);
    if (it == hierarchies.end()) it = hierarchies.insert(hierarchies.end(), role_h[r]);
    *role_slot[r] = static_cast<int>(it - hierarchies.begin());
  }

  for (int h : hierarchies) {
    const auto& hier = probe.v1[h];
    Placement p;
    p.base = spec.under_hierarchy_root ? hier.mount_point : hier.own_dir;
    p.parent = p.base + "/" + spec.parent;
    p.dir = p.parent + "/" + name;
    // The parent is kept, but an operator (or an older corral) may remove it
    // between our steps: ENOENT means make it again.
    Status made;
    for (int attempt = 0; attempt < 5; ++attempt) {
      made = make_parent_chain(kWho, p.base, spec.parent, [](const std::string&) { return Status{}; });
      if (made) made = make_dir(kWho, p.dir, false);
      if (made || made.error().code() != ENOENT) break;
    }
    if (!made) return fail(std::move(made).error());
    b->placements.push_back(std::move(p));
  }

  std::vector<std::string> in_force;
  if (b->memory >= 0) {
    const std::string dir = b->placements[b->memory].dir;
    if (spec.memory_bytes) {
      const std::string value = std::to_string(*spec.memory_bytes);
      if (Status s = write_text(kWho, dir + "/memory.limit_in_bytes", value); !s)
        return fail(std::move(s).error());
      in_force.push_back("memory.limit_in_bytes=" + value);
      if (file_exists(dir + "/memory.memsw.limit_in_bytes")) {
        if (Status s = write_text(kWho, dir + "/memory.memsw.limit_in_bytes", value); !s)
          return fail(std::move(s).error());
        in_force.push_back("memory.memsw.limit_in_bytes=" + value);
        b->swap_capped = true;
      } else {
        in_force.push_back("swap not capped (no memory.memsw.limit_in_bytes: swap accounting off)");
      }
    }
    // Written only when inherited as disabled: the write itself is one of
    // the v1 knobs newer kernels warn about.
    auto oom = read_text(kWho, dir + "/memory.oom_control");
    if (!oom) return fail(std::move(oom).error());
    if (cgroupfs::keyed_value(*oom, "oom_kill_disable").value_or(0) != 0)
      if (Status s = write_text(kWho, dir + "/memory.oom_control", "0"); !s) return fail(std::move(s).error());
  }
  if (b->pids >= 0 && spec.pids_max) {
    const std::string value = std::to_string(*spec.pids_max);
    if (Status s = write_text(kWho, b->placements[b->pids].dir + "/pids.max", value); !s)
      return fail(std::move(s).error());
    in_force.push_back("pids.max=" + value);
  }
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
  // The child joins through `tasks`, not cgroup.procs. Writing "0" to
  // cgroup.procs takes the global cgroup_threadgroup_rwsem for writing, and
  // on a kernel without favordynmods that waits for an RCU grace period:
  // 5-13 ms per run on this 2-CPU host. A single-thread move of the writer
  // itself ("0" into tasks) skips that lock (kernel/cgroup/cgroup.c,
  // cgroup_procs_write_start) and costs ~20 us. The joiner is a freshly
  // cloned, single-threaded child, so moving its one thread moves all of it.
  for (const auto& p : b->placements) {
    auto fd = open_join_file(kWho, p.dir, "tasks");
    if (!fd) return fail(std::move(fd).error());
    b->join_fds.push_back(std::move(*fd));
  }
  b->description = in_force.empty() ? "accounting only" : "";
  for (const auto& s : in_force) b->description += (b->description.empty() ? "" : ", ") + s;
  return std::unique_ptr<CgroupBackend>(std::move(b));
}

}  // namespace corral::detail
