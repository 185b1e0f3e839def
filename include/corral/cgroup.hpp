// One cgroup per run: a memory ceiling with swap capped, a pids ceiling, CPU
// accounting, OOM-kill detection, whole-group kill, peak memory and CPU time,
// and removal on every path.
//
// Two backends behind one interface, chosen by probing the host once:
//   v2 (unified hierarchy) — one directory per run; CLONE_INTO_CGROUP fd;
//      cgroup.kill (5.14) or cgroup.freeze (5.2) for the group kill.
//   v1 (legacy hierarchies) — one directory per run in each of the memory,
//      pids, cpuacct and freezer hierarchies that is mounted.
// Most hosts run v2; hosts that still mount memory/pids on v1 (including the
// one corral is developed on) get v1.
//
// Where run cgroups go: by default under the caller's own cgroup in each
// hierarchy, in a parent group named `corral` (`<own>/corral/<run>-<pid>-<rand>`).
// That needs no privilege beyond write access to our own cgroup (root, or a
// delegated subtree), and it keeps corral's runs inside whatever limits
// were placed on corral itself. `under_hierarchy_root` puts the parent at
// the hierarchy's root instead (root only; the way out on v2 hosts where our
// own cgroup is a leaf that holds processes, see docs/cgroup.md).
//
// Who runs what: everything here runs in the parent (supervisor), except
// join_cgroup_in_child(), which is async-signal-safe and meant for the child
// between clone and exec.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "corral/fd.hpp"
#include "corral/status.hpp"

namespace corral {

enum class CgroupVersion : std::uint8_t { none, v1, v2 };
std::string_view cgroup_version_name(CgroupVersion v);  // "none", "v1", "v2"

// ---------------------------------------------------------------- probe

// One mounted v1 hierarchy. Several controllers may share one ("cpu,cpuacct").
struct CgroupV1Hierarchy {
  std::vector<std::string> controllers;  // from the mount's super options
  std::string mount_point;               // e.g. /sys/fs/cgroup/memory
  std::string own_dir;  // where this process sits in it; "" when outside the mount
  bool writable = false;  // we may create children in own_dir (asked of the memory, pids, cpuacct and freezer ones)
};

struct CgroupProbe {
  // v2: the cgroup2 mount, our cgroup in it, and what our cgroup can hand to
  // its children (cgroup.controllers of our cgroup).
  bool v2_mounted = false;
  std::string v2_mount;
  std::string v2_own_dir;  // "" when our cgroup is outside the mount
  bool v2_own_is_root = false;
  std::vector<std::string> v2_controllers;
  bool v2_writable = false;
  bool v2_kill = false;    // cgroup.kill (kernel >= 5.14)
  bool v2_freeze = false;  // cgroup.freeze (kernel >= 5.2)
  bool v2_peak = false;    // memory.peak (kernel >= 5.19)

  // v1: every mounted hierarchy, and which one carries each controller we use
  // (an index into v1, or -1).
  std::vector<CgroupV1Hierarchy> v1;
  int v1_memory = -1, v1_pids = -1, v1_cpuacct = -1, v1_freezer = -1, v1_devices = -1;
  bool v1_memsw = false;  // memory.memsw.* exists: swap can be capped

  // Where the mounts above were learnt: "statmount" (each hierarchy asked
  // at its usual place, Linux 6.11+) or "mountinfo" (the whole table).
  std::string mounts_from;
  // Cgroup mounts the table lists that no path reaches (another mount over
  // them or over a directory above them), left out of the above:
  // "memory at /sys/fs/cgroup/memory". Only the table can show them.
  std::vector<std::string> hidden_mounts;
  // "out of reach under another mount: memory at ..." ("" when none), for
  // the messages that say why a controller is missing.
  std::string hidden_note() const;

  // What create_run_cgroup uses, and why nothing when none.
  CgroupVersion backend = CgroupVersion::none;
  std::string why_none;

  // Whether the chosen backend has a controller ("memory", "pids", "cpu",
  // "freezer", "devices": v2's is a BPF program, there from kernel 4.15).
  bool has(std::string_view controller) const;
  // One line for `corral enforcement`, e.g.
  // "cgroup v1: memory,pids,cpuacct,freezer at /sys/fs/cgroup/{...}; swap capped; v2 at
  //  /sys/fs/cgroup/unified: hugetlb only (unused)".
  std::string describe() const;
};

// Where the probe reads from. Tests point these at fake files; the mount
// points named in the mountinfo text may be any directory. With the
// default mountinfo, the kernel is asked first where the hierarchies of
// self_cgroup are mounted (statmount, at their usual places), and the
// table is read only when it cannot tell.
struct CgroupProbeSources {
  std::string mountinfo = "/proc/self/mountinfo";
  std::string self_cgroup = "/proc/self/cgroup";
  std::string kernel_release;  // "" = uname(2); used when a file cannot tell
};

// Never fails: a host without usable cgroups gets backend none and why_none.
CgroupProbe probe_cgroups();
CgroupProbe probe_cgroups(const CgroupProbeSources& sources);

// ---------------------------------------------------------------- a run's cgroup

// A device a run may open: `type` 'c' (character) or 'b' (block), and its
// numbers; minor -1 is every minor of `major`.
struct DeviceRule {
  char type = 'c';
  unsigned major = 0;
  int minor = -1;
};

struct CgroupSpec {
  // When set, the only devices the group's tasks may open (read, write,
  // mknod): v1 "a" into devices.deny, then each rule into devices.allow;
  // v2 a BPF_PROG_TYPE_CGROUP_DEVICE program attached to the run group
  // (cgroup_devices.cpp). Unset: the host's device rules, untouched.
  std::optional<std::vector<DeviceRule>> devices;
  // Ceiling of the group's memory (v2 memory.max; v1 memory.limit_in_bytes).
  // Swap is capped at zero where the kernel accounts it (v2 memory.swap.max,
  // v1 memory.memsw.limit_in_bytes); RunCgroup::swap_capped() says.
  std::optional<std::uint64_t> memory_bytes;
  // Ceiling of tasks (processes and threads) in the group: pids.max.
  std::optional<std::uint64_t> pids_max;
  // Join the CPU accounting (v1 cpuacct; v2 cpu.stat is always there).
  bool cpu_accounting = true;
  // v1: join the pids hierarchy without a pids_max too, for
  // CgroupStats::pids_current. (v2: pids is one controller of one group.)
  bool pids_accounting = true;
  // v1: join the freezer, so that kill_all() freezes the group before it
  // kills it and no fork slips between. A run alone in a pid namespace of
  // its own can go without: killing its pid 1 kills the namespace as a
  // whole, and the kernel stops forks in it first. The container tier does,
  // and saves a hierarchy (mkdir, join, freeze/thaw, rmdir: ~0.1 ms a run).
  bool freezer_kill = true;
  // The parent group, relative to our own cgroup (or to the hierarchy root
  // when under_hierarchy_root); one or more components of [A-Za-z0-9_.-].
  std::string parent = "corral";
  bool under_hierarchy_root = false;
  // v1: remove() kills the group and leaves its directories for
  // reuse_run_cgroup (making and removing a memory group costs ~0.4 ms)
  // when the run left them clean: no OOM kill, no refused fork (counters
  // that cannot be reset), its memory ceiling never reached, at most
  // kReuseResidueBytes of pages still charged to it (a file the run left
  // on a tmpfs stays charged to the group that wrote it, and would shrink
  // the next run's ceiling; a removed group hands its charges to its
  // parent), and at most kReuseChargedBytes in all (the kernel's memory
  // too: reserves, dentries of the paths the run looked up; the next
  // run's peak starts from what is charged when it joins).
  // While a RunCgroup holds a reusable group it holds LOCK_EX on the
  // group's first directory (run_cgroup_held). Otherwise (and with device
  // rules, and on v2, where it is held the same way) removed as usual.
  bool reusable = false;
};

inline constexpr std::uint64_t kReuseResidueBytes = 1u << 20;
inline constexpr std::uint64_t kReuseChargedBytes = 4u << 20;

struct CgroupStats {
  // Processes the kernel OOM killer killed in the group (v2 memory.events
  // oom_kill; v1 memory.oom_control oom_kill, kernel >= 4.13). nullopt when
  // the backend has no memory controller to ask. Any OOM killer's kill
  // counts, the host's too: alone it does not say the group's ceiling was
  // the cause (hit_ceiling does).
  std::optional<std::uint64_t> oom_kills;
  // v2 memory.events oom_group_kill (5.17): times memory.oom.group killed
  // the group as a whole.
  std::optional<std::uint64_t> oom_group_kills;
  // The group's usage reached its own memory ceiling: v2 memory.events
  // `oom` > 0 (the limit was reached and an allocation was about to fail;
  // counted before every OOM kill the ceiling causes); v1 the high-water mark
  // of memory (memory.max_usage_in_bytes) or of memory+swap
  // (memory.memsw.max_usage_in_bytes) within kOomChargePages pages of its
  // limit. (v1's failcnt cannot say it: memsw is charged first, and recent
  // kernels count failures of the memory counter only, so at equal limits
  // both failcnt files stayed 0 through an OOM on 6.18.) An OOM under an
  // ancestor's limit or of the host leaves it false.
  bool hit_ceiling = false;
  // v1 memory.oom_control under_oom: a task of the group is in the memory
  // cgroup's OOM path right now (the kernel clears it once the OOM is handled).
  bool under_oom = false;
  // High-water mark of the group's memory (v2 memory.peak, kernel >= 5.19;
  // v1 memory.max_usage_in_bytes).
  std::optional<std::uint64_t> memory_peak_bytes;
  // CPU time of every task that ran in the group (v1 cpuacct.usage in ns;
  // v2 cpu.stat usage_usec, so microsecond granularity).
  std::optional<std::uint64_t> cpu_usage_ns;
  std::optional<std::uint64_t> pids_current;
  // Forks refused because pids.max was reached (pids.events "max").
  std::optional<std::uint64_t> pids_limit_hits;

  bool oom_killed() const noexcept { return oom_kills.value_or(0) > 0; }
  // Whether the group's own memory ceiling ended in the OOM path: usage
  // reached the ceiling (hit_ceiling) and the kernel went on to
  // the OOM killer (oom_kills, oom_group_kills, under_oom) or, on v1,
  // `notified` says the OOM eventfd fired (RunCgroup::oom_notifier). The
  // eventfd is evidence no kill can race: it fires before the kernel picks a
  // victim, so a supervisor that kills the run on it first leaves oom_kill
  // at 0 (a dying task is not chosen, nothing is counted). Never true for a
  // group that stayed under its ceiling, whatever killed it.
  bool ceiling_oom(bool notified = false) const noexcept {
    const bool oom_path = oom_killed() || oom_group_kills.value_or(0) > 0 || under_oom || notified;
    return hit_ceiling && oom_path;
  }
};

// The memory controller invokes its OOM killer only for a charge of at most
// 8 pages (order <= PAGE_ALLOC_COSTLY_ORDER, mm/memcontrol.c mem_cgroup_oom)
// that no longer fits, so a group that went OOM at its own ceiling had its
// usage within this many pages of the limit.
inline constexpr std::uint64_t kOomChargePages = 8;

namespace detail {
class CgroupBackend;
}

// At most one join fd per v1 role (memory, pids, cpuacct, freezer, devices).
inline constexpr int kCgroupMaxJoinFds = 5;

// A run's cgroup. Owns its directories and fds; the destructor kills
// whatever is still inside and removes the directories (errors ignored —
// call kill_all()/remove() yourself to see them).
class RunCgroup {
 public:
  RunCgroup(RunCgroup&&) noexcept;
  RunCgroup& operator=(RunCgroup&&) noexcept;
  RunCgroup(const RunCgroup&) = delete;
  RunCgroup& operator=(const RunCgroup&) = delete;
  ~RunCgroup();

  CgroupVersion version() const noexcept;
  // The unique directory name, "<run_name>-<pid>-<8 hex>".
  const std::string& name() const noexcept;
  // Every directory of the run (v2: one; v1: one per joined hierarchy).
  std::vector<std::string> dirs() const;
  // The ceilings in force, e.g. "memory.max=67108864, memory.swap.max=0, pids.max=20".
  std::string describe() const;
  // False when the kernel does not account swap (no memory.swap.max /
  // memory.memsw.*): then memory_bytes bounds RAM only.
  bool swap_capped() const noexcept;

  // v2: an O_DIRECTORY|O_CLOEXEC fd of the run's directory for clone3's
  // CLONE_INTO_CGROUP (kernel >= 5.7). -1 on v1. Owned by the RunCgroup.
  int cgroup_fd() const noexcept;

  // Parent side: move `pid` into the run's cgroup in every hierarchy. Do it
  // before releasing the child to exec (a sync pipe), so nothing it does
  // escapes the limits.
  Status add_process(pid_t pid);

  Expected<CgroupStats> stats() const;

  // v1: an eventfd (EFD_CLOEXEC|EFD_NONBLOCK, owned by the caller) that
  // becomes readable when the group enters the memory controller's OOM path
  // (registered through cgroup.event_control on memory.oom_control). The
  // kernel signals it after reclaim failed and BEFORE its OOM killer picks a
  // victim (mm/memcontrol-v1.c, memcg1_oom_prepare), and again when the
  // group is removed (memcg_event_remove): read it before remove(). It also
  // fires for an OOM of an ancestor's limit; CgroupStats::ceiling_oom tells
  // the two apart. v1's OOM killer kills one victim and lets the rest run
  // on; a supervisor that polls this fd can end the whole run, as v2's
  // memory.oom.group does in the kernel. v2, or no memory controller: an
  // invalid fd.
  Expected<UniqueFd> oom_notifier() const;

  // Kill every process in the group, descendants that called setsid()
  // included, and wait (bounded) until the group is empty.
  // v2: cgroup.kill; else freeze, SIGKILL each pid, thaw (thawing on every
  // path); v1 without a freezer: SIGKILL each pid until none is left.
  Status kill_all();

  // Send `sig` (a polite one: SIGTERM before a grace) to every process in
  // the group, descendants that called setsid() included, except `except`
  // (a leader the caller signalled itself). The list is read again until no
  // new pid shows up (a process forked between a read and our kill is then
  // reached too), a few rounds at most. No freeze: a process the signal
  // ends is meant to run its handler. ESRCH (gone meanwhile) is no error.
  Status signal_all(int sig, pid_t except = 0);

  // kill_all(), then rmdir every directory (retrying briefly while the
  // kernel still releases exiting tasks). Idempotent. The parent group is
  // kept: making and removing it per run doubled the run's mkdir/rmdir cost
  // (a v1 mkdir populates a directory of control files, ~50-100 us each).
  Status remove();

  // Make the group a parent of groups of its own (a session: pid 1 in
  // <dir>/<leaf>, each exec in a group below <dir>), before any process
  // joins it. v2: a group may hand memory and pids to children only while
  // it holds no process itself ("no internal processes"), so its processes
  // go to the leaf: memory and pids are enabled in <dir>'s
  // cgroup.subtree_control (refused with the reason when they cannot be),
  // memory.oom.group is set back to 0 on <dir> (an OOM at its ceiling
  // takes one child group, not all), <dir>/<leaf> is made and cgroup_fd()
  // and the join fds point at it. kill_all() still kills the whole subtree,
  // stats() still reads <dir>, and remove() takes the child groups away
  // bottom-up before <dir>. v1: nothing to do (a v1 group may hold
  // processes and children).
  Status hold_processes_in(std::string_view leaf);

  // The join fds (O_WRONLY|O_CLOEXEC, opened by the parent, owned by the
  // RunCgroup) for join_cgroup_in_child. Plain ints in the object itself
  // so a CLONE_VM child reads them without following any pointer we free.
  const int* join_fds() const noexcept { return join_fds_; }
  int join_fd_count() const noexcept { return join_count_; }

 private:
  friend Expected<RunCgroup> reuse_run_cgroup(const CgroupProbe&, const CgroupSpec&, std::string_view);
  friend Expected<RunCgroup> create_run_cgroup(const CgroupProbe&, const CgroupSpec&,
                                               std::string_view);
  explicit RunCgroup(std::unique_ptr<detail::CgroupBackend> backend);

  std::unique_ptr<detail::CgroupBackend> backend_;
  int join_fds_[kCgroupMaxJoinFds] = {-1, -1, -1, -1, -1};

  int join_count_ = 0;
};

// RunCgroup::oom_notifier's eventfd on any v1 memory group `dir` (a
// session's group): it fires for an OOM at `dir`'s ceiling or an
// ancestor's, never a descendant's. An empty fd when `dir` has no
// memory.oom_control (v2, or not the memory hierarchy).
Expected<UniqueFd> cgroup_v1_oom_notifier(const std::string& dir);
// The same on the first of `dirs` (a group's one per hierarchy) that is a
// v1 memory group; an empty fd when none is.
Expected<UniqueFd> cgroup_v1_oom_notifier(const std::vector<std::string>& dirs);

// Make the run's cgroup: the parent group (created when missing and then kept; on v2 with
// the needed controllers enabled down to it), then a uniquely named child
// with the ceilings written. run_name is a label: [A-Za-z0-9_.-], at most 64
// characters, "" means "run". Errors name the file and the value.
Expected<RunCgroup> create_run_cgroup(const CgroupProbe& probe, const CgroupSpec& spec,
                                      std::string_view run_name);

// v1: take over the directories <parent>/<name> (in the hierarchies
// create_run_cgroup would use for `spec`) that a reusable run left, held
// from here on: checked empty, with no OOM kill and no refused fork
// counted; the ceilings written again (an absent one as none), the memory
// high-water marks, failcnts and the CPU usage reset. Errors: EAGAIN when
// another RunCgroup holds it, ENOENT when it is gone, EBUSY when it was
// unfit (processes left, an OOM kill or a refused fork counted, a
// hierarchy missing): then it was removed here, its processes killed. A
// group is held only once create_run_cgroup has made all its directories:
// the caller keeps its makes and reuses under one parent from overlapping.
// v2: ENOTSUP (memory.events and pids.events cannot be reset).
Expected<RunCgroup> reuse_run_cgroup(const CgroupProbe& probe, const CgroupSpec& spec, std::string_view name);
// Whether this host's backend reuses groups (v1).
bool run_cgroups_reusable(const CgroupProbe& probe) noexcept;
// Whether a live RunCgroup holds the reusable group whose first directory
// is `dir` (a LOCK_SH|LOCK_NB probe of its flock).
bool run_cgroup_held(const std::string& dir);
// The probe as seen from inside existing groups (a session's, one per
// hierarchy it uses): create_run_cgroup with it makes groups below them
// (<group>/<spec.parent>/<run>). v2: the first of `group_dirs` is our own
// cgroup, one that holds no process (RunCgroup::hold_processes_in); v1:
// each hierarchy one of `group_dirs` lies in has it as its own dir, the
// others are not used.
CgroupProbe probe_below(const CgroupProbe& host, const std::vector<std::string>& group_dirs);

// Child side, between clone and exec: move the calling process into the
// run's cgroup by writing "0" ("the writer") to each join fd: cgroup.procs
// on v2, `tasks` on v1, where a move of the writer's own thread skips the
// global threadgroup lock and its RCU wait (~20 us instead of 5-13 ms; see
// src/cgroup_v1.cpp). The caller must be single-threaded, as a child
// between clone/fork and exec is. Checked by tests/cgroup_test.cpp. Async-signal-safe:
// raw write(2) only, no allocation; safe in a CLONE_VM|CLONE_VFORK child.
// The kernel checks the permission of whoever opened the fd (>= 5.16), so a
// child may call it after dropping privileges. Returns 0 or a positive errno.
// A CLONE_VM child keeps charging memory to the parent's memory cgroup
// until exec gives it its own mm.
int join_cgroup_in_child(const RunCgroup& run) noexcept;

// Remove empty run cgroups left by a supervisor that died: children of the
// parent group whose name carries a pid that no longer exists. Groups that
// still hold processes are left alone (rmdir refuses them). Returns how many
// directories were removed. The pid is the maker's in its own pid
// namespace: across pid namespaces (containers) it says nothing, and an
// empty group a live supervisor has just made could go. What corral itself
// sweeps at start goes by owner record instead (leftovers.hpp).
Expected<int> sweep_stale_run_cgroups(const CgroupProbe& probe, const CgroupSpec& spec);

// The same walk over the children of the parent group (in each hierarchy
// the backend uses), removing the empty ones whose name `is_stale` accepts.
Expected<int> sweep_run_cgroups(const CgroupProbe& probe, const CgroupSpec& spec,
                                const std::function<bool(std::string_view)>& is_stale);

// A group and everything below it, by path, whoever made it (what a dead
// session keeper left): every process in the subtree killed (v2
// cgroup.kill on `dir` first; then, on both versions, SIGKILL to whatever
// any cgroup.procs of the subtree still lists until none does, bounded by
// timeout_ms), then each group removed, children before their parent. A
// group that is already gone is no error. Errors name the step.
Status kill_and_remove_cgroup_tree(const std::string& dir, int timeout_ms = 2000);

// ---------------------------------------------------------------- file formats
// Pure parsing of cgroupfs files, public so tests (and tools that watch
// another supervisor's cgroups) can use them on any directory.
namespace cgroupfs {

// The value of `key` in a flat keyed file ("key value" per line:
// memory.events, memory.oom_control, cpu.stat, pids.events). Keys match
// whole words: "oom" does not match "oom_kill". nullopt when absent or not a
// number.
std::optional<std::uint64_t> keyed_value(std::string_view text, std::string_view key);
// A space-separated list (cgroup.controllers, cgroup.subtree_control).
std::vector<std::string> word_list(std::string_view text);
// A single number, or "max" (returned as UINT64_MAX). nullopt otherwise.
std::optional<std::uint64_t> single_value(std::string_view text);

// Directories that hold each controller's files; "" when absent. On v2 all
// three are the run's directory.
struct StatDirs {
  std::string memory, pids, cpu;
  // v1: whether a memory ceiling was written to the group. Without one its
  // limits are the kernel's "none" and no peak can be at them, so the limit
  // files and the memory+swap peak (three reads) are not read and
  // hit_ceiling is false, as it would be.
  bool memory_ceiling = true;
};
// Read CgroupStats from the files of `version`. A file that is missing is
// an absent value; a file that exists but does not parse is an error naming it.
Expected<CgroupStats> read_stats(CgroupVersion version, const StatDirs& dirs);

}  // namespace cgroupfs

}  // namespace corral
