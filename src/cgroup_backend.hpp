// Internal: the interface the v1 and v2 backends implement, and the cgroupfs
// file helpers they share. Everything here runs in the parent.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "corral/cgroup.hpp"
#include "corral/fd.hpp"
#include "text.hpp"  // split

namespace corral::detail {

// ---- text helpers.
std::string_view trim(std::string_view s);
std::optional<std::uint64_t> parse_u64(std::string_view s);  // digits only, whitespace trimmed
bool contains(const std::vector<std::string>& v, std::string_view x);
std::string join(const std::vector<std::string>& v, std::string_view sep);

// ---- file helpers. `who` prefixes messages: "cgroup v1", "cgroup v2".
Expected<std::string> read_text(std::string_view who, const std::string& path);
// Errors name the value and the file: "cgroup v1: write '67108864' to /x/memory.limit_in_bytes: ...".
Status write_text(std::string_view who, const std::string& path, std::string_view value);
bool file_exists(const std::string& path);
// mkdir 0755; EEXIST is success when exist_ok.
Status make_dir(std::string_view who, const std::string& path, bool exist_ok);
// The pids in dir/cgroup.procs. A directory that vanished reads as empty.
Expected<std::vector<pid_t>> read_procs(std::string_view who, const std::string& dir);
// SIGKILL every pid listed in any of the dirs' cgroup.procs; returns how many
// were listed.
Expected<int> kill_listed(std::string_view who, const std::vector<std::string>& dirs);
// Until every dir's cgroup.procs is empty: SIGKILL what is listed (a task
// that was mid-fork when the group was killed), then sleep a little. Bounded
// by timeout_ms; ETIMEDOUT names the survivors.
Status kill_until_empty(std::string_view who, const std::vector<std::string>& dirs, int timeout_ms);
// dir and every group below it, each child before its parent (the order
// rmdir needs). A directory that vanished meanwhile is left out.
std::vector<std::string> cgroup_subtree(const std::string& dir);
// rmdir, retried while EBUSY (the kernel still detaching tasks that were just
// killed) up to timeout_ms; ENOENT is success.
Status remove_group(std::string_view who, const std::string& dir, int timeout_ms);
void sleep_ms(int ms);
// Monotonic clock in milliseconds.
long long now_ms();

// Which directory a run dir sits in: base/<parent>/<name>. Kept so that
// remove() can take away the parent group when it is empty.
struct Placement {
  std::string base;    // our own cgroup, or the hierarchy root
  std::string parent;  // base + "/" + spec.parent
  std::string dir;     // parent + "/" + name
};

// The variant part of a RunCgroup. A backend owns its directories and fds;
// its destructor does not touch the kernel (RunCgroup's does, via remove()).
class CgroupBackend {
 public:
  virtual ~CgroupBackend() = default;
  virtual CgroupVersion version() const noexcept = 0;
  virtual int cgroup_fd() const noexcept { return -1; }
  virtual Expected<CgroupStats> stats() const = 0;
  virtual Status kill_all() = 0;
  // Whether remove() leaves the (killed, empty) directories for another
  // run (CgroupSpec::reusable) instead of removing them.
  virtual bool left_for_reuse() const { return false; }
  // Whether remove() may try the rmdirs before any kill (see remove()): not
  // for a group that may be left for reuse (that needs its counters read
  // first), nor for one with groups below it, nor where kill_all() writes
  // a file of a directory an rmdir may already have taken (v1's freezer).
  virtual bool rmdir_first() const { return !nested; }
  // RunCgroup::hold_processes_in. v1 has nothing to do.
  virtual Status hold_processes_in(const std::string& leaf) {
    (void)leaf;
    return {};
  }

  std::string who() const { return version() == CgroupVersion::v2 ? "cgroup v2" : "cgroup v1"; }
  std::vector<std::string> dirs() const;
  // Parent side of placement: the pid into every cgroup.procs (opened by
  // path, so a removed group fails loudly with ENOENT).
  Status add_process(pid_t pid);
  // rmdir each run dir, killing what is left first when a group refuses
  // (kill_all, then rmdir retrying while EBUSY). Idempotent.
  Status remove();

  std::string name;
  std::string description;  // the ceilings in force
  bool swap_capped = false;
  std::vector<Placement> placements;  // one per hierarchy (v2: one)
  // What join_cgroup_in_child writes "0" to, parallel to placements,
  // O_WRONLY|O_CLOEXEC: v2 cgroup.procs, v1 tasks (see open_join_file).
  std::vector<UniqueFd> join_fds;
  // A reusable group: its first directory, LOCK_EX while this run holds
  // it (RunCgroup::held_by_a_run); released when remove() removed or left it.
  UniqueFd hold;
  bool removed = false;
  // Groups were made below the run dir (hold_processes_in): remove() takes
  // them away first.
  bool nested = false;
};

// The spec checks both backends share: run name, parent path, values.
Status validate_spec(const CgroupSpec& spec, std::string_view run_name);
// "<label>-<pid>-<8 hex>", label = run_name or "run".
std::string unique_run_name(std::string_view run_name);
// Open dir/<file> O_WRONLY|O_CLOEXEC for the child's join ("cgroup.procs"
// on v2, "tasks" on v1).
Expected<UniqueFd> open_join_file(std::string_view who, const std::string& dir, const char* file);
// mkdir the chain base/<parent components> (each may exist) — the caller
// enables controllers between levels through `at_level`, called with each
// directory from base down to the parent group (base first).
template <class F>
Status make_parent_chain(std::string_view who, const std::string& base, const std::string& parent_rel,
                         F&& at_level);

// v2 devices (cgroup_devices.cpp): the BPF program allowing exactly
// `rules`, loaded and attached to the group at `cgroup_dir_fd`; its fd.
Expected<UniqueFd> attach_device_program(int cgroup_dir_fd, const std::vector<DeviceRule>& rules);

Expected<std::unique_ptr<CgroupBackend>> create_v1(const CgroupProbe& probe, const CgroupSpec& spec,
                                                   const std::string& name);
// The directories a reusable v1 run left under <parent>/<name>, taken over
// (reuse_run_cgroup).
Expected<std::unique_ptr<CgroupBackend>> reuse_v1(const CgroupProbe& probe, const CgroupSpec& spec,
                                                  const std::string& name);
// The v2 directory run cgroups go under (create_v2 and the sweeps agree on
// it): the hierarchy root with under_hierarchy_root, else our own cgroup —
// or, when our own cgroup is not the root and holds processes (so the
// kernel refuses it domain controllers for children: "no internal
// processes"), its parent, if that holds none and we may write its
// cgroup.subtree_control and cgroup.procs. That is the layout of a
// delegated unit (systemd Delegate=yes with DelegateSubgroup=, a container
// runtime's cgroup namespace with the payload in a leaf): the runs go beside
// corral, inside the delegation and its limits.
std::string v2_run_base(const CgroupProbe& probe, const CgroupSpec& spec);
Expected<std::unique_ptr<CgroupBackend>> create_v2(const CgroupProbe& probe, const CgroupSpec& spec,
                                                   const std::string& name);

// ---- template definition
template <class F>
Status make_parent_chain(std::string_view who, const std::string& base, const std::string& parent_rel,
                         F&& at_level) {
  std::string dir = base;
  if (Status s = at_level(dir); !s) return s;
  std::string_view rest = parent_rel;
  while (!rest.empty()) {
    auto slash = rest.find('/');
    dir += '/';
    dir += rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
    if (Status s = make_dir(who, dir, true); !s) return s;
    if (Status s = at_level(dir); !s) return s;
  }
  return {};
}

}  // namespace corral::detail
