// container: the `container` tier of a run. Composes the mechanism modules
// into one sandbox per run — user, pid, net, mount, ipc, uts and cgroup
// namespaces (namespaces.hpp, mount_tree.hpp), a cgroup with the memory and
// pids ceilings (cgroup.hpp), seccomp `default`, every capability dropped,
// no_new_privs, a non-root uid inside — and spawns it next to the vfork
// Spawner, returning the same Spawner::Child so the supervisor's loop does
// not change.
//
// Life of a container run (who runs what):
//   prepare_run (parent)   prepare_container: mount tree with the workspace
//                          at /workspace (the cwd), namespaces, the run's
//                          cgroup, seccomp BPF. Nothing runs yet.
//   supervisor (parent)    spawn_container: clone3 fork-like (no CLONE_VFORK,
//                          no CLONE_FILES: the parent writes the uid/gid maps
//                          while the child waits, and pid 1 never execs; in a
//                          namespace template CLONE_VM, the parent waiting for
//                          the program's exec) with the namespace flags, CLONE_PIDFD
//                          and, on cgroup v2, CLONE_INTO_CGROUP; write the
//                          maps; release the child; wait until the program
//                          has exec'd or a {stage, errno} record says why not.
//   child (pid 1 inside)   setsid, join the cgroup (v1), apply the
//                          namespaces, split into pid 1 and the program.
//   program (pid 2)        stdio, rlimits, capabilities, seccomp, execve.
//   supervisor             kill_container for the deadline, grace and cancel.
//   finish_run (parent)    finish_container: the program's real status from
//                          pid 1's report, the cgroup's OOM evidence, CPU
//                          and peak memory of the whole tree, then the
//                          cgroup is removed; the run layer classifies.
// The run layer and the supervisor reach all of these through the container
// runner (tier_runner.hpp, container_runner.cpp), never directly.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "corral/cgroup.hpp"
#include "corral/fd.hpp"
#include "corral/namespaces.hpp"
#include "corral/request.hpp"
#include "corral/spawn.hpp"
#include "corral/status.hpp"
#include "corral/tier_limits.hpp"
#include "corral/workspace.hpp"

namespace corral {

struct HostFacts;
struct PreparedRun;
struct Result;
struct RunEnd;
struct TierFacts;

// Where the workspace is inside, and the program's cwd.
inline constexpr std::string_view kContainerWorkspace = "/workspace";
// As root, the workspace is a tmpfs of workspace_bytes, this much unless
// the request says: a per-run ceiling on what a run can write there (a
// host directory has none), and no disk work per run. Its pages count
// against memory_bytes. Work that needs more (a big tree) binds a host
// directory with --bind or --cwd.
inline constexpr std::uint64_t kContainerWorkspaceBytes = kDefaultWorkspaceBytes;
// Where that holds: fsopen of a tmpfs needs CAP_SYS_ADMIN, so as root.
// Rootless, the workspace is a directory under the base.
bool container_workspace_on_tmpfs(const HostFacts& host);
// The uid (and gid) the program runs as inside unless the request names one.
// 65534 is what the issue asks for; note that host files whose owner is not
// mapped (all of /usr) also show as 65534 inside — only the kernel's real
// ids decide access, so this is cosmetic, but a program comparing st_uid
// with getuid() will think it owns them.
inline constexpr uid_t kContainerDefaultUid = 65534;

// /dev/shm's size unless shm_bytes says (tier_limits.hpp).
inline constexpr std::uint64_t kContainerShmBytes = kDefaultShmBytes;
// /tmp's size (and a --tmpfs's without a size) unless tmp_bytes says: 1 GiB
// (at 64 MiB CPython's test_venv hit ENOSPC), at most memory_bytes when that
// is set. A tmpfs takes
// memory only as it is written, and those pages count against memory_bytes
// (the writer's cgroup pays for them), so the size is a per-mount cap and
// the run's memory the real one.
std::uint64_t container_tmp_bytes_default(const Limits& limits);
// The PATH a container's program gets unless the request sets one (the
// host's names the host's directories: ~/.local/bin, pyenv shims, ...).
inline constexpr std::string_view kContainerPath = "/usr/local/bin:/usr/bin:/bin";

// "SRC[:DST][:owner=UID[:GID]]" (DST absolute, default SRC) as a bind. The
// split is at the last ":/", so a SRC that contains ':' works when DST is
// given. owner= only for a writable bind, never 0 (GID defaults to UID).
// Errors name the text.
Expected<MountBind> parse_bind_spec(std::string_view text, bool writable);
// "PATH[:SIZE]": SIZE in bytes, or with a K, M or G suffix (powers of
// 1024); without one the tmpfs is tmp_bytes in size.
Expected<TmpfsMount> parse_tmpfs_spec(std::string_view text);

// What a container run holds between prepare and finish. Owned by the
// PreparedRun (shared_ptr: PreparedRun moves).
// Template mode's child runs on the spawner's memory (spawn_container):
// pid 1's stack and the program's, mapped here and unmapped only once pid 1
// has exited (its pidfd readable), so no stack of a live child is ever
// handed back to the allocator. Destroyed with pid 1 still running (a
// failure path), it kills pid 1 and waits for its exit first.
struct BorrowedStacks {
  ChildStack pid1, program;
  UniqueFd pid1_pidfd;  // a copy of pid 1's pidfd, taken right after the clone
  BorrowedStacks() = default;
  BorrowedStacks(BorrowedStacks&&) = default;
  BorrowedStacks& operator=(BorrowedStacks&&) = delete;
  ~BorrowedStacks();
};

struct ContainerRun {
  // Declared first, destroyed last: the stacks outlive everything else here.
  std::optional<BorrowedStacks> stacks;
  PreparedNamespaces ns;
  std::optional<RunCgroup> cgroup;
  // v1: the child joins through the cgroup's procs fds and then unshares
  // its cgroup namespace itself (so the namespace is rooted at the run's
  // group); v2: CLONE_INTO_CGROUP and CLONE_NEWCGROUP in one clone3.
  bool join_in_child = false;
  // The run's cgroup has a memory ceiling: its OOM killer may pick any
  // process in the group, and one that shares our memory takes us with it
  // (the kernel kills every process using the victim's mm, and the OOM
  // reaper unmaps it). Then pid 1 gets a copy of our memory, never ours
  // (spawn_container).
  bool memory_ceiling = false;
  UniqueFd devnull;      // the program's stdin when the request gives none
  // The idmapped copies of the writable binds (idmap.hpp), made here and
  // attached by the child (MountTreeSpec::attach); closed at the end.
  std::vector<UniqueFd> bind_mounts;
  std::vector<std::string> notes;  // for the result's detail (a root-owned bind's files, ...)
  UniqueFd pid1_report;  // read end of pid 1's Pid1Report pipe (spawn_container)
  UniqueFd oom_event;    // v1: readable once the run's cgroup enters the OOM path (RunCgroup::oom_notifier)
  std::string failure;   // the full message when the child failed before exec
  std::uint64_t setup_ns = 0;  // child entry -> just before execve
  // The spawn does not wait for the exec (see spawn_container): the child's
  // records (its set-up time just before execve, a failure after it) wait
  // in this pipe until the run ends (read_container_exec_report).
  UniqueFd exec_report;
  // What the child wrote to exec_report before the spawn returned (template
  // mode waits for the exec: spawn_container); read_container_exec_report
  // takes these first.
  std::string exec_records;
  // A session exec (session.hpp): the live session it joins; spawned by
  // spawn_session_exec instead of building namespaces.
  std::shared_ptr<struct SessionJoin> session{};
};

// Parent, from prepare_container (container_mounts.cpp): the request's
// binds (writable ones idmapped as root), tmpfs mounts and devices into
// `tree`, and tmp_bytes/shm_bytes into run.limits.
Status add_container_mounts(PreparedRun& run, const HostFacts& host, uid_t outside_uid, gid_t outside_gid,
                            MountTreeSpec& tree, ContainerRun& c);

// Parent, from prepare_run: the mount tree (workspace at /workspace, the
// request's rootfs and binds), the namespaces with the inside uid
// (request.user or 65534) mapped to `outside` (a uid of the run's own when
// root, our own ids when rootless), the run's cgroup with the limits whose
// mechanism is the cgroup in this tier (tier_limits.hpp: memory_bytes,
// process_count) as its ceilings when the host can create one, and seccomp
// `default`. Fills run.container, run.plan.seccomp and, for ceilings that
// were acknowledged as unenforceable, run.warnings. Errors name the
// request's field.
Status prepare_container(PreparedRun& run, const HostFacts& host, uid_t outside_uid, gid_t outside_gid);

// Parent: clone the child for `plan` with `c`'s namespaces and cgroup, write
// the maps and release it. Built per run it does not wait for the exec: the
// child is a fork-like copy, and its set-up (~1.5 ms of mount tree, pid 1
// and the program's last steps) runs on its own while the supervisor's loop
// goes on with other runs. In a namespace template the child is cloned with
// CLONE_VM instead (no copy of our page tables, none to tear down when pid
// 1 exits, no copy-on-write faults here afterwards) and the call returns
// once the program has exec'd or failed, as the vfork Spawner's does: until
// then the child reads `plan` and `c` in our memory. An Error is corral's
// own failure (pipe, clone3). Maps that cannot be written: a Child with
// report.stage namespaces, already killed and reaped, the message in
// c.failure. A child that fails before exec writes a record and exits; the run then
// ends like any other and read_container_exec_report() turns the record into
// a spawn stage (namespaces, cgroup, fds, rlimits, capabilities, seccomp,
// execve) with the full message in c.failure.
Expected<Spawner::Child> spawn_container(ChildPlan& plan, ContainerRun& c);
// The same, with the signals to reset to SIG_DFL in the child given
// (Spawner::ignored_signals(): SigIgn read once per supervisor, not per run).
Expected<Spawner::Child> spawn_container(ChildPlan& plan, ContainerRun& c, std::uint64_t ignored_signals);

// Parent, once the run has ended (pid 1 reaped, so every writer of the pipe
// is gone): the failure record, if the child wrote one, into end.report and
// c.failure; the setup time into end.report.setup_ns, the child's clone
// time into end.clone_seconds. Nobody waits for the exec itself (see
// spawn_container): its time is not known, and the Result has none.
void read_container_exec_report(ContainerRun& c, RunEnd& end);

// Parent: the supervisor's group kill for this tier. SIGKILL: pid 1 (its
// death ends the pid namespace) and every task in the cgroup. Any other
// signal goes to pid 1, which forwards TERM, INT, HUP, QUIT, USR1 and USR2
// to the program; for a session exec (no pid 1 of its own) to the leader
// and every other process of the exec's cgroup.
void kill_container(ContainerRun& c, const Pidfd& pid1, int sig);

// Parent, from finish_run (the container runner's finish), once the run's
// uid was cleared: the program's real status from pid 1's report
// (Pid1Report), RunEnd::oom_killed from the cgroup's evidence
// (CgroupStats::ceiling_oom: the ceiling was hit, and the OOM eventfd fired
// — end.oom_notified or its count read here — or the kernel counted an OOM
// kill), whole-tree CPU time and peak memory from the cgroup, notes for the
// result's detail; then the cgroup is removed. The run layer applies the
// facts and classifies the outcome (classify_outcome) once.
TierFacts finish_container(ContainerRun& c, const RunEnd& end);

}  // namespace corral
