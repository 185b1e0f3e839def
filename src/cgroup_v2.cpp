// cgroup v2 backend: one run directory in the unified hierarchy. Runs in the
// parent.
//
// Kernel facts it leans on (Documentation/admin-guide/cgroup-v2.rst):
// - A controller reaches a child only when every ancestor lists it in
//   cgroup.subtree_control, and a non-root cgroup may enable a domain
//   controller (memory, pids) for its children only while it holds no
//   processes itself ("no internal processes"); the write fails with EBUSY
//   otherwise. So the parent group is made process-free and our own cgroup
//   must be the root or a delegated cgroup without processes.
// - memory.swap.max exists only with swap accounting; memory.oom.group
//   (4.19) makes an OOM kill take the whole group, as a container would.
// - cgroup.kill (5.14) SIGKILLs every task of the subtree, forks in flight
//   included; cgroup.freeze (5.2) is the fallback; a frozen v2 task still
//   dies of SIGKILL, but we thaw on every path regardless.
// - cgroup.events "populated 0|1" raises POLLPRI on change: the kill waits
//   on it instead of sleeping.
// - CLONE_INTO_CGROUP (5.7) takes an fd of the run directory.
// - A group with child groups (hold_processes_in: a session, pid 1 in a
//   leaf, an exec group each) keeps memory.oom.group 0: on an OOM the
//   kernel kills the highest group with oom.group set between the victim's
//   and the one whose limit was hit (mem_cgroup_get_oom_group), so an OOM
//   at the session's ceiling takes one exec group whole (theirs is 1), and
//   never the session. cgroup.kill and cgroup.events cover the subtree.
#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>

#include "cgroup_backend.hpp"

namespace corral::detail {
namespace {

constexpr const char* kWho = "cgroup v2";

class V2Backend final : public CgroupBackend {
 public:
  CgroupVersion version() const noexcept override { return CgroupVersion::v2; }
  int cgroup_fd() const noexcept override {
    if (removed) return -1;
    return leaf_fd ? leaf_fd.get() : dir_fd.get();
  }

  Expected<CgroupStats> stats() const override {
    if (removed) return Error(ENOENT, std::string(kWho) + ": run cgroup " + name + " was removed");
    const std::string& dir = placements[0].dir;
    return cgroupfs::read_stats(CgroupVersion::v2, {dir, dir, dir});
  }

  Status kill_all() override {
    if (removed) return {};
    auto pop = populated();
    if (!pop) return std::move(pop).error();
    if (!*pop) return {};
    const std::string& dir = placements[0].dir;
    Status first;
    auto keep = [&](Status s) {
      if (first && !s) first = std::move(s);
    };
    bool killed = false;
    if (has_kill) {
      Status s = write_text(kWho, dir + "/cgroup.kill", "1");
      killed = s.ok();
      keep(std::move(s));
    }
    if (!killed && has_freeze) {
      Status froze = write_text(kWho, dir + "/cgroup.freeze", "1");
      if (froze) wait_events("frozen", 1, 1000);
      keep(std::move(froze));
      auto k = kill_listed(kWho, member_dirs());
      if (!k) keep(std::move(k).error());
      keep(write_text(kWho, dir + "/cgroup.freeze", "0"));  // on every path
    }
    // Wait for the exits; a straggler (no cgroup.kill, a task mid-fork)
    // gets SIGKILL again from the loop.
    if (!wait_events("populated", 0, 2000)) keep(kill_until_empty(kWho, member_dirs(), 3000));
    return first;
  }

  Status hold_processes_in(const std::string& leaf) override {
    if (removed) return Error(ENOENT, std::string(kWho) + ": run cgroup " + name + " was removed");
    const std::string& dir = placements[0].dir;
    auto pop = populated();
    if (!pop) return std::move(pop).error();
    if (*pop)
      return Error(EBUSY, std::string(kWho) + ": " + dir +
                              " already holds processes: its processes must go to a leaf before any joins");
    // What the child groups get is what this one was given (its parent's
    // subtree_control); without memory and pids there the exec groups
    // could have neither ceilings nor OOM accounting.
    auto offered = read_text(kWho, dir + "/cgroup.controllers");
    if (!offered) return std::move(offered).error();
    const auto available = cgroupfs::word_list(*offered);
    auto current = read_text(kWho, dir + "/cgroup.subtree_control");
    if (!current) return std::move(current).error();
    const auto on = cgroupfs::word_list(*current);
    for (const char* c : {"memory", "pids"}) {
      if (contains(on, c)) continue;
      if (!contains(available, c))
        return Error(ENOTSUP, std::string(kWho) + ": " + dir + " cannot hand the " + c +
                                  " controller to its child groups: it is not offered to it (cgroup.controllers: " +
                                  (available.empty() ? std::string("none") : join(available, " ")) +
                                  "); enable it in the parent's cgroup.subtree_control or delegate it");
      if (Status s = write_text(kWho, dir + "/cgroup.subtree_control", std::string("+") + c); !s)
        return Error(s.error().code(), s.error().message() + " (" + dir + " cannot hand the " + c +
                                           " controller to its child groups)");
    }
    // An OOM at this group's ceiling takes the child group the kernel's
    // victim is in (its own memory.oom.group), not every child at once.
    if (file_exists(dir + "/memory.oom.group"))
      if (Status s = write_text(kWho, dir + "/memory.oom.group", "0"); !s) return s;
    const std::string leaf_dir = dir + "/" + leaf;
    if (Status s = make_dir(kWho, leaf_dir, false); !s) return s;
    nested = true;  // from here on remove() takes the leaf (and any sibling) first
    UniqueFd fd(::open(leaf_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return Error::from_errno(errno, std::string(kWho) + ": open " + leaf_dir);
    auto procs = open_join_file(kWho, leaf_dir, "cgroup.procs");
    if (!procs) return std::move(procs).error();
    leaf_fd = std::move(fd);
    join_fds.clear();
    join_fds.push_back(std::move(*procs));
    description += std::string(description.empty() ? "" : ", ") + "processes in " + leaf +
                   "/, memory and pids handed to child groups";
    return {};
  }

  UniqueFd dir_fd, events_fd;
  UniqueFd leaf_fd;  // hold_processes_in: where clone3 places a child
  UniqueFd device_prog;  // attached to the group; goes with its rmdir
  bool has_kill = false, has_freeze = false;

 private:
  // The groups whose cgroup.procs can list a process of the run: the run
  // dir, and once nested every group below it.
  std::vector<std::string> member_dirs() const {
    if (!nested) return {placements[0].dir};
    auto tree = cgroup_subtree(placements[0].dir);
    return tree.empty() ? std::vector<std::string>{placements[0].dir} : tree;
  }

  Expected<bool> populated() const {
    if (!events_fd) {
      for (const auto& d : member_dirs()) {
        auto pids = read_procs(kWho, d);
        if (!pids) return std::move(pids).error();
        if (!pids->empty()) return true;
      }
      return false;
    }
    auto v = events_value("populated");
    if (!v) return Error(EIO, std::string(kWho) + ": " + placements[0].dir + "/cgroup.events has no 'populated'");
    return *v != 0;
  }

  std::optional<std::uint64_t> events_value(const char* key) const {
    char buf[256];
    ssize_t n = ::pread(events_fd.get(), buf, sizeof buf - 1, 0);
    if (n <= 0) return std::nullopt;
    return cgroupfs::keyed_value(std::string_view(buf, static_cast<std::size_t>(n)), key);
  }

  // Until cgroup.events shows key == want, or timeout. Sleeps in poll(2);
  // the short poll slice covers a kernel that does not notify.
  bool wait_events(const char* key, std::uint64_t want, int timeout_ms) const {
    if (!events_fd) return false;
    const long long deadline = now_ms() + timeout_ms;
    while (true) {
      if (events_value(key) == want) return true;
      long long left = deadline - now_ms();
      if (left <= 0) return false;
      struct pollfd pfd {events_fd.get(), POLLPRI, 0};
      (void)::poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 50)));
    }
  }
};

}  // namespace

std::string v2_run_base(const CgroupProbe& probe, const CgroupSpec& spec) {
  if (spec.under_hierarchy_root) return probe.v2_mount;
  const std::string& own = probe.v2_own_dir;
  if (own.empty() || own == probe.v2_mount || probe.v2_own_is_root) return own;
  auto members = read_procs(kWho, own);
  if (!members || members->empty()) return own;  // process-free: it can hand controllers down
  auto slash = own.rfind('/');
  if (slash == std::string::npos || slash < probe.v2_mount.size()) return own;
  std::string parent = own.substr(0, slash);
  auto parent_members = read_procs(kWho, parent);
  if (!parent_members || !parent_members->empty()) return own;
  if (::access((parent + "/cgroup.subtree_control").c_str(), W_OK) != 0 ||
      ::access((parent + "/cgroup.procs").c_str(), W_OK) != 0)
    return own;
  return parent;
}

Expected<std::unique_ptr<CgroupBackend>> create_v2(const CgroupProbe& probe, const CgroupSpec& spec,
                                                   const std::string& name) {
  if (probe.v2_own_dir.empty())
    return Error(ENOTSUP, std::string(kWho) + ": no cgroup2 mount shows our cgroup");
  const std::string base = v2_run_base(probe, spec);
  auto offered = read_text(kWho, base + "/cgroup.controllers");
  if (!offered) return std::move(offered).error();
  auto available = cgroupfs::word_list(*offered);
  auto has = [](const std::vector<std::string>& v, std::string_view c) { return contains(v, c); };

  auto offered_list = [&] {
    std::string out;
    for (const auto& c : available) out += (out.empty() ? "" : " ") + c;
    return out.empty() ? std::string("none") : out;
  };
  std::vector<std::string> required, wanted;
  if (spec.memory_bytes) required.emplace_back("memory");
  if (spec.pids_max) required.emplace_back("pids");
  for (const auto& c : required)
    if (!has(available, c))
      return Error(ENOTSUP, std::string(kWho) + ": " + (c == "memory" ? "memory_bytes" : "pids_max") +
                                " needs the " + c + " controller, which " + base +
                                " does not offer (cgroup.controllers: " +
                                offered_list() + ")");
  // Memory and pids even without a ceiling: they give peak memory and the
  // task count. Dropped quietly when not required and not enableable.
  for (const char* c : {"memory", "pids"})
    if (has(available, c)) wanted.emplace_back(c);

  // Called for base and each level of the parent group: hand the wanted
  // controllers down to the next level.
  std::vector<std::string> notes;
  auto enable = [&](const std::string& dir) -> Status {
    auto current = read_text(kWho, dir + "/cgroup.subtree_control");
    if (!current) return std::move(current).error();
    auto on = cgroupfs::word_list(*current);
    for (auto it = wanted.begin(); it != wanted.end();) {
      if (has(on, *it)) {
        ++it;
        continue;
      }
      Status s = write_text(kWho, dir + "/cgroup.subtree_control", "+" + *it);
      if (s) {
        ++it;
        continue;
      }
      if (has(required, *it)) {
        if (s.error().code() != EBUSY) return s;
        return Error(EBUSY, s.error().message() + " (" + dir +
                                " holds processes, and a v2 cgroup that holds processes cannot hand "
                                "controllers to children: run corral in a leaf of a delegated cgroup, "
                                "e.g. a unit with Delegate=yes and DelegateSubgroup=supervisor, or set "
                                "under_hierarchy_root as root)");
      }
      notes.push_back(*it + " not enabled (" + s.error().message() + ")");
      it = wanted.erase(it);
    }
    return {};
  };

  auto b = std::make_unique<V2Backend>();
  b->name = name;
  auto fail = [&](Error e) -> Error {
    (void)b->remove();
    return e;
  };
  Placement p;
  p.base = base;
  p.parent = base + "/" + spec.parent;
  p.dir = p.parent + "/" + name;
  // The parent is kept, but an operator (or an older corral) may remove it
  // between our steps: ENOENT means make it again.
  Status made;
  for (int attempt = 0; attempt < 5; ++attempt) {
    made = make_parent_chain(kWho, base, spec.parent, enable);
    if (made) made = make_dir(kWho, p.dir, false);
    if (made || made.error().code() != ENOENT) break;
  }
  if (!made) return std::move(made).error();
  b->placements.push_back(p);
  if (spec.reusable) {
    // Never reused on v2 (memory.events cannot be reset), but held the
    // same way while its RunCgroup lives (run_cgroup_held): a sweep of
    // groups nobody holds leaves it alone.
    b->hold.reset(::open(p.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!b->hold || ::flock(b->hold.get(), LOCK_EX) != 0)
      return fail(Error::from_errno(errno, std::string(kWho) + ": hold " + p.dir));
  }

  std::vector<std::string> in_force;
  auto set = [&](const char* file, const std::string& value) -> Status {
    if (Status s = write_text(kWho, p.dir + "/" + file, value); !s) return s;
    in_force.push_back(std::string(file) + "=" + value);
    return {};
  };
  if (spec.memory_bytes) {
    if (Status s = set("memory.max", std::to_string(*spec.memory_bytes)); !s) return fail(std::move(s).error());
    if (file_exists(p.dir + "/memory.swap.max")) {
      if (Status s = set("memory.swap.max", "0"); !s) return fail(std::move(s).error());
      b->swap_capped = true;
    } else {
      in_force.emplace_back("swap not capped (no memory.swap.max: swap accounting off)");
    }
    if (file_exists(p.dir + "/memory.oom.group"))
      if (Status s = set("memory.oom.group", "1"); !s) return fail(std::move(s).error());
  }
  if (spec.pids_max)
    if (Status s = set("pids.max", std::to_string(*spec.pids_max)); !s) return fail(std::move(s).error());

  b->dir_fd.reset(::open(p.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!b->dir_fd) return fail(Error::from_errno(errno, std::string(kWho) + ": open " + p.dir));
  b->events_fd.reset(::open((p.dir + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC));  // optional
  if (spec.devices) {
    // Before any task joins: the program is in force from the first exec.
    auto prog = attach_device_program(b->dir_fd.get(), *spec.devices);
    if (!prog) return fail(std::move(prog).error());
    b->device_prog = std::move(*prog);
    in_force.push_back("BPF device program (" + std::to_string(spec.devices->size()) + " rules)");
  }
  // Used only where clone3 cannot place the child itself (CLONE_INTO_CGROUP).
  auto procs = open_join_file(kWho, p.dir, "cgroup.procs");
  if (!procs) return fail(std::move(procs).error());
  b->join_fds.push_back(std::move(*procs));
  // The run directory is the authority; the probe can only turn a feature
  // off (tests use that to drive the fallbacks on a kernel that has both).
  b->has_kill = probe.v2_kill && file_exists(p.dir + "/cgroup.kill");
  b->has_freeze = probe.v2_freeze && file_exists(p.dir + "/cgroup.freeze");

  for (auto& n : notes) in_force.push_back(std::move(n));
  b->description = in_force.empty() ? "accounting only" : "";
  for (const auto& s : in_force) b->description += (b->description.empty() ? "" : ", ") + s;
  return std::unique_ptr<CgroupBackend>(std::move(b));
}

}  // namespace corral::detail
