// spawn: execute a child plan. The plan is immutable data prepared in the
// parent (argv/envp arrays, fds, rlimits, ids, capability drop, Landlock
// ruleset, seccomp BPF, cwd); the child walks it with raw syscalls and
// execs. A failure before exec is a {stage, errno} record the parent turns
// into `spawn_failed`.
#pragma once

#include <signal.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "corral/capabilities.hpp"
#include "corral/fd.hpp"
#include "corral/ipc_namespace.hpp"
#include "corral/landlock.hpp"
#include "corral/private_tmpfs.hpp"
#include "corral/privilege.hpp"
#include "corral/process.hpp"
#include "corral/rlimits.hpp"
#include "corral/seccomp.hpp"
#include "corral/status.hpp"

namespace corral {

class SpawnThread;  // spawn_thread.hpp

// Steps of the child between clone and exec, in the order it takes them.
enum class SpawnStage : std::uint8_t {
  none = 0,
  signals,
  setsid,
  landlock,
  fds,
  rlimits,
  bounding_set,
  privilege,
  capabilities,
  chdir,
  seccomp,
  execve,
  namespaces,  // container tier: namespaces.hpp's apply (the full message is in the detail)
  cgroup,      // container tier: joining the run's cgroup
  parent_death,  // PR_SET_PDEATHSIG, or the supervisor died before it was set
  mounts,        // tier process: the run's own /dev/shm (private_tmpfs.hpp) in its mount namespace
  oom_score,     // oom_score_adj 1000 (ChildPlan::first_oom_victim)
};
std::string_view to_string(SpawnStage stage);

struct ChildPlan {
  // Exec: candidate paths tried in order (execvp semantics, resolved against
  // the child's PATH in the parent), argv and envp as NULL-terminated arrays.
  std::vector<std::string> exec_paths;
  std::vector<std::string> argv_storage;
  std::vector<std::string> env_storage;
  std::string cwd;

  // Installed as the child's 0/1/2; owned by the plan until spawn.
  UniqueFd stdin_fd;
  bool merge_output = false;

  std::optional<RlimitSet> rlimits;
  std::optional<CapabilityDrop> capabilities;
  std::optional<PrivilegeDrop> privilege;
  // Right after the privilege drop, kill(-1, SIGKILL): every other process
  // of the run's uid, i.e. what a dead former holder of a freshly locked
  // uid left (UidPool::Reap::by_first_process). ESRCH (none) is success.
  bool reap_uid_first = false;
  // oom_score_adj 1000 (make_first_oom_victim_in_child): every run's
  // process is what the kernel's OOM killer takes before anything else.
  bool first_oom_victim = false;
  std::optional<LandlockRuleset> landlock;
  // Shared: the BPF is immutable, and compiling it costs more than a spawn.
  std::shared_ptr<const SeccompProgram> seccomp;
  // When `seccomp` notifies (SeccompProgram::notifies): the same filter
  // with plain errno refusals, installed instead when the kernel gives no
  // listener (EBUSY: this process already runs under a notifying filter).
  // The vfork path only; the container path takes no notifying filter.
  std::shared_ptr<const SeccompProgram> seccomp_fallback;
  // CLONE_NEW* flags the vfork path's clone3 adds (tier process as root:
  // CLONE_NEWIPC; CLONE_NEWNS with private_workspace or private_shm). The container path builds
  // its namespaces itself.
  std::uint64_t clone_namespaces = 0;
  // Tier process as root with confined writes: a tmpfs of the run's own
  // attached over /dev/shm in the run's mount namespace (CLONE_NEWNS), first
  // thing after setsid. Its fd closes with the plan, after the spawn.
  std::optional<PrivateTmpfs> private_shm;
  // Tier process as root with a sized workspace: the workspace's tmpfs
  // attached over its directory, before private_shm (same namespace).
  std::optional<PrivateTmpfs> private_workspace;

  // Filled by finalize(): the pointer arrays into the storage above.
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::vector<const char*> exec_path_ptrs;
  void finalize();
};

// Shared by both spawn paths (the vfork one here, the container one in
// container_spawn.cpp).

// Child side: execve each of plan.exec_path_ptrs in turn (execvp semantics:
// ENOENT/ENOTDIR go on to the next, EACCES is remembered, anything else
// stops). Returns only on failure, with the most telling errno.
int exec_plan_in_child(const ChildPlan& plan) noexcept;

// Parent: the signals this process ignores (1..31), which a child must set
// back to SIG_DFL before exec. One sigaction() per signal (29 calls, cheaper
// than a cold read of /proc/self/status, and no need of /proc).
std::uint64_t ignored_signal_mask();

// Parent: a CLOEXEC pipe; `what` names it in the error ("pipe for stdout").
// With nonblocking_read our end is O_NONBLOCK; the child's stays blocking.
Status make_child_pipe(UniqueFd& read_end, UniqueFd& write_end, const std::string& what, bool nonblocking_read);

// The record a child leaves when it fails before exec (or the time it took
// when it did not). Written by the child through shared memory on the
// CLONE_VM path and through a CLOEXEC pipe otherwise.
struct ChildReport {
  SpawnStage stage = SpawnStage::none;
  int error = 0;
  std::uint64_t setup_ns = 0;  // child entry → just before the first execve
  std::uint64_t entry_ns = 0;  // CLOCK_MONOTONIC at child entry (vfork path; 0 on the other)
  // The vfork path: the listener of a notifying seccomp filter, installed
  // into the fd table the child still shared with us (so it is ours; the
  // child's private copy drops it). -1: none.
  int seccomp_listener = -1;
};

// Parent-side resources reused across spawns. Owns the child stack and a
// few reserved low fd slots: the child shares our fd table (CLONE_FILES),
// copies only the slots (close_range CLOSE_RANGE_UNSHARE), so spawning stays
// O(1) however many pipes and pidfds the supervisor holds.
//
// A process-tier child (one that drops the bounding set and changes its
// uid) is cloned from the Spawner's SpawnThread (spawn_thread.hpp) once one
// is running: its bounding set is empty and its IPC namespace fresh there
// already, so the child skips both. The thread starts at the second such
// spawn (a one-run CLI never pays for it); until it is set up, and for
// every other child, this thread clones.
class Spawner {
 public:
  static Expected<Spawner> create();
  Spawner(Spawner&&) noexcept;
  Spawner& operator=(Spawner&&) noexcept;
  ~Spawner();

  struct Child {
    Pidfd pidfd;
    UniqueFd stdout_read;   // CLOEXEC; blocking (the supervisor reads with RWF_NOWAIT)
    UniqueFd stderr_read;   // invalid when merge_output
    // Our copies of the pipes' write ends, still open: the program's EOF
    // waits for them to close. Handed back so that a caller with an
    // io_uring closes them with its next submit (no close(2) each); they
    // close with the Child otherwise.
    UniqueFd stdout_write, stderr_write;
    ChildReport report;     // stage != none: exec never happened
    UniqueFd seccomp_listener;  // a notifying filter's listener (CLOEXEC); whoever holds it must answer
    // Cloned from the SpawnThread into its fresh IPC namespace: that
    // namespace, held, for recycle_ipc_namespace (invalid otherwise).
    HeldIpcNamespace ipc_namespace;
    double clone_seconds = 0;          // our clone3 call → the child's first instruction
    std::optional<double> exec_seconds;  // the child's execve → we were released (the program's image in place)
  };

  // Spawns the plan. An Error is corral's own failure (pipe, clone3); a
  // child that failed before exec is a Child with report.stage set (and
  // already reaped).
  Expected<Child> spawn(ChildPlan& plan);

  // Signals this process ignores are reset to SIG_DFL in every child. The
  // set is read when the Spawner is created (a /proc read is not worth
  // paying per spawn); call this after changing a disposition.
  void refresh_ignored_signals();
  // A Child::ipc_namespace whose run is over and none of whose processes
  // is left (SpawnThread::recycle): a later run may be born in it if it is
  // empty then. Dropped when no spawn thread runs.
  void recycle_ipc_namespace(HeldIpcNamespace ipc_namespace);
  // That set (the container tier's spawn resets the same one).
  std::uint64_t ignored_signals() const noexcept { return ignored_signals_; }

 private:
  Spawner() = default;
  // The SpawnThread to clone `plan`'s child from, starting it when due;
  // null: this thread clones.
  SpawnThread* thread_for(const ChildPlan& plan);
  ChildStack stack_;
  UniqueFd devnull_;
  UniqueFd slots_[3];   // stdin, stdout, stderr sources, /dev/null between spawns
  int max_slot_ = -1;
  std::uint64_t ignored_signals_ = 0;
  unsigned thread_worthy_spawns_ = 0;
  bool thread_failed_ = false;
  std::unique_ptr<SpawnThread> thread_;  // last: joined before the stack it clones on goes
};

}  // namespace corral
