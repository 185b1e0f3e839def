// Linux namespaces for the `container` tier: user (uid/gid maps written by
// the parent), pid (a tiny pid 1 that reaps and forwards the exit), net
// (empty, `lo` up), mount (mount_tree.hpp), uts (hostname), ipc, cgroup.
// Rootful (we are root: the inside id maps to any unprivileged host id) and
// rootless (the inside id maps to our own id, setgroups denied) both.
//
// The sequence, for a spawner (the process module) to follow:
//
//   parent:  auto ns = prepare_namespaces(spec);          // allocates, validates
//            clone3(flags = ns->clone_flags() | ...)       // NOT CLONE_VFORK: the parent
//                                                          // must act while the child waits
//   child:   apply_namespaces_in_child(*ns, report_fd, &failure)
//              waits for the parent's maps -> drops groups (rootful) -> setresgid/setresuid
//              to the inside ids -> sethostname -> lo up -> mount tree -> pid 1 split
//            returns 0 in the program's process; continue with rlimits, seccomp, exec.
//   parent:  ns->finish_in_parent(child_pid)              // write maps, release the child
//
// Everything named *_in_child is async-signal-safe: raw syscalls through
// corral::sys::call, no allocation, no locks, and it returns 0 or a positive
// errno. Spawn namespaced children fork-like (clone3 without CLONE_VM):
// CLONE_VFORK would deadlock (the parent writes the maps while the child
// waits), and with a pid namespace pid 1 never execs, so under CLONE_VM it
// would keep running on the spawner's memory and borrowed stack for the
// whole run. Nor CLONE_FILES: the child closes its copy of the sync pipe.
//
// Limits of the design, stated: a rootless child keeps the supplementary
// groups of its creator (setgroups is denied to it); the child resolves bind
// sources as the outside id (it needs search permission on their ancestors);
// a fresh /proc in a user namespace needs a host /proc with nothing mounted
// over parts of it (the kernel's mount_too_revealing rule), so it fails with
// EPERM under container runtimes that mask /proc paths.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "corral/fd.hpp"
#include "corral/mount_tree.hpp"
#include "corral/status.hpp"

namespace corral {

// ---- user namespace ----------------------------------------------------------

// One id of each kind: `inside` as the program sees it, `outside` the host id
// the kernel really uses (and what files it writes are owned by).
struct UserNsMap {
  uid_t inside_uid = 1000;
  gid_t inside_gid = 1000;
  uid_t outside_uid = 65534;
  gid_t outside_gid = 65534;
};

// Parent: write /proc/<child>/uid_map, then setgroups, then gid_map (one
// write each, as the kernel requires). `deny_setgroups` writes "deny" to
// setgroups, which an unprivileged writer must do before gid_map (see
// user_namespaces(7)); a rootful parent leaves it "allow" so the child can
// drop the supplementary groups it inherited (root's gid 0 would otherwise
// keep granting group access to host files).
Status write_id_maps(pid_t child, const UserNsMap& map, bool deny_setgroups);

// A one-shot pipe that holds a child until the parent has done its part.
// The parent owns both ends until clone; after it, the parent closes the read
// end and the child the write end (apply_namespaces_in_child does).
class SyncPipe {
 public:
  static Expected<SyncPipe> create();
  int read_fd() const noexcept { return read_.get(); }
  int write_fd() const noexcept { return write_.get(); }
  // Parent, after clone: let the child go (one byte), closing both ends.
  Status release();
  // Parent, on failure: close without releasing; the child reads EOF.
  void abandon() noexcept;

 private:
  UniqueFd read_, write_;
};

// Child: block until the parent writes its byte. 0 when released,
// ECANCELED when the pipe closed without it (the parent gave up or died),
// or read's errno. Closes nothing. Async-signal-safe.
int wait_for_parent_in_child(int fd) noexcept;

// ---- small child-side steps --------------------------------------------------

// Child: `lo` up in a new network namespace (socket + SIOCGIFFLAGS/SIOCSIFFLAGS).
int bring_up_loopback_in_child() noexcept;
// Child: sethostname in a new uts namespace.
int set_hostname_in_child(const char* name, std::size_t len) noexcept;

// ---- pid 1 -------------------------------------------------------------------

// How pid 1 reports the program's end. A pid namespace's init cannot die of
// a signal sent from inside its namespace (its own included), so pid 1 exits
// with the program's exit code, or with 128+N when signal N killed it. The
// two look alike from outside (a program may exit 137 itself); for the exact
// answer pid 1 writes this record to `report_fd` (when >= 0) just before it
// exits. No record (EOF) means pid 1 itself was killed from outside.
struct Pid1Report {
  std::uint32_t magic = 0;        // kPid1ReportMagic
  std::int32_t wait_status = 0;   // the program's raw wait status (WIFEXITED/WTERMSIG...)
};
inline constexpr std::uint32_t kPid1ReportMagic = 0x31646970;  // "pid1"
inline constexpr int kPid1SignalExitBase = 128;

// Child, running as pid 1 of a new pid namespace: fork the program's process
// and return 0 in it, with the signal mask it had on entry. In the original
// process, become the namespace's init and never return: close every fd but
// `report_fd`, drop all capabilities, turn non-dumpable (so the program,
// same uid, cannot ptrace it), all before the program goes on (it waits on
// a pipe for pid 1's word), then reap every child (orphans included) and
// forward SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 to the program;
// when the program ends, report and exit as described above. The kernel then
// kills everything left in the namespace. Returns a positive errno only if
// the fork itself failed (nothing changed then but the call's own state).
int fork_program_under_pid1_in_child(int report_fd) noexcept;

// ---- the combined spec -------------------------------------------------------

class NamespaceSpec {
 public:
  NamespaceSpec& user(bool on) { user_ = on; return *this; }
  NamespaceSpec& pid(bool on) { pid_ = on; return *this; }
  NamespaceSpec& net(bool on) { net_ = on; return *this; }
  NamespaceSpec& mount(bool on) { mount_ = on; return *this; }
  NamespaceSpec& ipc(bool on) { ipc_ = on; return *this; }
  NamespaceSpec& uts(bool on) { uts_ = on; return *this; }
  NamespaceSpec& cgroup(bool on) { cgroup_ = on; return *this; }
  // Default: inside 1000:1000; outside our own ids when rootless, 65534:65534
  // when root (callers that run many sandboxes should give each its own id).
  NamespaceSpec& map(UserNsMap m) { map_ = m; return *this; }
  NamespaceSpec& hostname(std::string name) { hostname_ = std::move(name); return *this; }
  NamespaceSpec& mounts(MountTreeSpec tree) { mounts_ = std::move(tree); return *this; }
  // PR_SET_PDEATHSIG SIGKILL once the child has its inside ids (the id switch
  // would clear it): the sandbox, and with pid 1 everything in it, dies with
  // the thread that cloned it. Off by default: only for a spawner whose
  // cloning thread lives as long as its children (a single-threaded
  // supervisor). A parent that died before that step is caught too: the
  // child then polls a pidfd of the preparing process (prepare opens it; the
  // clone must come from that process) and ends with NsStage::parent_death.
  NamespaceSpec& die_with_parent(bool on) { die_with_parent_ = on; return *this; }
  // Root only, with user, pid, net and mount on and no binds: enter a
  // namespace template (ns_template.hpp; made on first use) instead of
  // building the mount tree's base and a network namespace per run. The
  // child then stays in the host's user namespace until its mounts are made
  // (the template's namespaces are not ours to enter from a new one): it
  // joins the template's network namespace, copies its mount namespace,
  // mounts /proc, /tmp, /dev/shm and the workspace, and forks; the program
  // enters the user namespace template for its ids (open_userns_template),
  // pid 1 drops to the outside ids. When a template cannot be had, the run
  // is built the per-run way and template_error() says why.
  NamespaceSpec& use_template(bool on) { use_template_ = on; return *this; }
  NamespaceSpec& template_root(std::string dir) { template_root_ = std::move(dir); return *this; }

  bool user() const { return user_; }
  bool pid() const { return pid_; }
  bool net() const { return net_; }
  bool mount() const { return mount_; }
  bool ipc() const { return ipc_; }
  bool uts() const { return uts_; }
  bool cgroup() const { return cgroup_; }
  const std::optional<UserNsMap>& map() const { return map_; }
  const std::string& hostname() const { return hostname_; }
  const MountTreeSpec& mounts() const { return mounts_; }
  bool die_with_parent() const { return die_with_parent_; }
  bool use_template() const { return use_template_; }
  const std::string& template_root() const { return template_root_; }

 private:
  bool die_with_parent_ = false;
  bool use_template_ = false;
  std::string template_root_ = "/run/corral/templates";
  bool user_ = true, pid_ = true, net_ = true, mount_ = true, ipc_ = true, uts_ = true, cgroup_ = true;
  std::optional<UserNsMap> map_;
  std::string hostname_ = "corral";
  MountTreeSpec mounts_;
};

// Which stage of apply_namespaces_in_child failed.
enum class NsStage : std::uint8_t {
  none, sync, setgroups, setgid, setuid, hostname, loopback, mount_tree, pid1, parent_death,
  template_enter, user_ns, pid1_drop,
};

// The fixed record a failing child hands back (e.g. through its error pipe).
struct NsFailure {
  NsStage stage = NsStage::none;
  std::int32_t err = 0;
  MountFailure mount;  // when stage == mount_tree
};

// The program's side of the pid-1 split as a function (apply_namespaces_in_child).
using ProgramFunction = int (*)(void* arg, int err) noexcept;

// Everything one namespaced spawn needs, prepared. Single-use: it owns the
// sync pipe of one child (when a user namespace comes with the clone).
class PreparedNamespaces {
 public:
  // CLONE_NEW* flags for clone3.
  std::uint64_t clone_flags() const noexcept { return flags_; }
  bool rootless() const noexcept { return rootless_; }
  bool has_user() const noexcept;
  bool has_pid() const noexcept;
  const UserNsMap& map() const noexcept { return map_; }
  const PreparedMountTree* mount_tree() const noexcept { return has_tree_ ? &tree_ : nullptr; }
  const SyncPipe& sync() const noexcept { return sync_; }
  // In a namespace template (NamespaceSpec::use_template): its directory;
  // empty when built per run, and then template_error() is why, if one was asked for.
  const std::string& template_dir() const noexcept { return template_dir_; }
  const std::string& template_error() const noexcept { return template_error_; }
  bool in_template() const noexcept { return !template_dir_.empty(); }

  // Parent, right after clone: write the id maps (if a user namespace) and
  // release the child. On failure the child is abandoned (it reads EOF and
  // fails with NsStage::sync); the error names the step.
  Status finish_in_parent(pid_t child);
  // Parent, after a clone without CLONE_FILES (the child has its own
  // copies): close the template's namespaces and the detached workspace,
  // which only the child uses. Closed while the child's mount namespace
  // still holds the workspace, the mount's release is cheap; the last
  // reference dropped after that namespace is gone cost ~0.3 ms on the
  // run's critical path.
  void release_child_fds() noexcept {
    template_mnt_.reset();
    template_net_.reset();
    template_user_.reset();
    workspace_fd_.reset();
  }
  // Template mode only: pid 1 is cloned with CLONE_VM and runs on the
  // spawner's memory (container_spawn.cpp), the program on `stack` (mapped
  // by the spawner, kept until pid 1 has exited). The program's ids map to
  // pid 1's host uid and gid, and the kernel's ptrace check compares host
  // ids, so the user namespaces do not keep the program out of pid 1 (nor
  // of the spawner's memory): the address space's dumpable flag, which the
  // kernel sets to fs.suid_dumpable at each id change of a task on it, and
  // the program's Landlock domain (the template's scoping, which refuses
  // it every process outside the domain whatever that flag says) do. pid 1
  // does not set the flag, the spawner's, itself.
  void share_spawner_memory(void* stack, std::size_t size) noexcept {
    program_stack_ = stack;
    program_stack_size_ = size;
  }
  // Parent, when clone itself failed: drop the pipe.
  void abandon() noexcept {
    sync_.abandon();
    parent_pidfd_.reset();
  }

  // "namespaces: mount tree: step 6 'bind /usr (ro, from /usr)': open_tree: ..."
  Error error_for(const NsFailure& failure) const;

 private:
  friend Expected<PreparedNamespaces> prepare_namespaces(const NamespaceSpec& spec);
  friend int apply_namespaces_in_child(const PreparedNamespaces&, int, NsFailure*, ProgramFunction, void*) noexcept;

  std::uint64_t flags_ = 0;
  bool rootless_ = false;
  bool die_with_parent_ = false;
  UniqueFd parent_pidfd_;  // die_with_parent: a pidfd of the preparing process, for the child
  UserNsMap map_;
  std::string hostname_;
  bool has_tree_ = false;
  PreparedMountTree tree_;  // the per-run part when in a template
  SyncPipe sync_;
  // Template mode: the namespaces to enter (the program enters the user
  // namespace) and the detached workspace the tree attaches.
  std::string template_dir_, template_error_;
  UniqueFd template_mnt_, template_net_, template_user_, workspace_fd_;
  void* program_stack_ = nullptr;  // share_spawner_memory
  std::size_t program_stack_size_ = 0;
};

// Parent: validate the spec (ids, hostname, mount tree against this host),
// decide rootful/rootless from the effective uid, make the sync pipe.
Expected<PreparedNamespaces> prepare_namespaces(const NamespaceSpec& spec);

// Child, just after clone3(ns.clone_flags()). Async-signal-safe. Returns 0 in
// the process that should become the program (after the pid-1 split when a
// pid namespace is on; pid 1 itself never returns), or a positive errno with
// *failure filled (may be null). `pid1_report_fd`: see Pid1Report (-1: none).
int apply_namespaces_in_child(const PreparedNamespaces& ns, int pid1_report_fd, NsFailure* failure) noexcept;

// The program's side as a function. With a pid namespace, the program is
// made with CLONE_VM instead of a fork: it shares pid 1's memory until its
// execve (no page tables copied, none to tear down at the exec), on a stack
// of its own, and runs program(arg, err) there: err is 0, or the errno of a
// failed namespace step with *failure filled; what it returns is its exit
// status. It must touch nothing but its stack, prepared data and raw
// syscalls, and end in execve or exit. pid 1 never returns; this call
// returns only a positive errno from a step before the split. Needs a pid
// namespace (EINVAL, stage pid1, without one).
int apply_namespaces_in_child(const PreparedNamespaces& ns, int pid1_report_fd, NsFailure* failure,
                              ProgramFunction program, void* arg) noexcept;

const char* ns_stage_name(NsStage stage) noexcept;

// ---- child-side steps that report an NsFailure ------------------------------

// Child: setresgid then setresuid (raw calls: glibc's set*id would
// broadcast to the parent's threads). 0, or the errno with f->stage setgid
// or setuid.
int switch_ids_in_child(long gid, long uid, NsFailure* f) noexcept;
// Child: PR_SET_PDEATHSIG SIGKILL, then ESRCH if `parent_pidfd` (a pidfd of
// the parent) says the parent exited before that. Credential changes clear
// PDEATHSIG: call it after the last one. 0 or errno.
int die_with_parent_in_child(int parent_pidfd) noexcept;

// Template mode's pid-1 split (NamespaceSpec::use_template): right after the
// fork the program, still host root, setns(2)es into the user namespace
// template; pid 1 becomes the outside ids, with parent_pidfd >= 0 sets its
// PDEATHSIG and checks the parent, and only then lets the program switch
// to the inside ids.
struct Pid1UserNs {
  int userns_fd;  // the user namespace template (ns_template.hpp) the program enters
  long inside_uid, inside_gid, outside_uid, outside_gid;
  int parent_pidfd;  // die_with_parent: a pidfd of the supervisor, else -1
  // Set when pid 1 itself was cloned with CLONE_VM (PreparedNamespaces::
  // share_spawner_memory): the program's stack, which the spawner mapped
  // (pid 1 maps none: in the spawner's memory it would outlive the run),
  // and pid 1 leaves the dumpable flag alone (it is the address space's,
  // so the spawner's).
  void* program_stack = nullptr;
  long program_stack_size = 0;
};
// fork_program_under_pid1_in_child, with template mode's user namespace
// step when `userns` is set: the program setns(2)es into the template and
// takes the inside ids; pid 1 drops to the outside ids (and checks the
// supervisor) before it lets the program go. Failures in the program fill
// *failure (stage pid1, user_ns, pid1_drop, setgid or setuid) and return
// the errno.
int fork_program_under_pid1_in_child(int report_fd, const Pid1UserNs* userns, NsFailure* failure) noexcept;
// The same with the program made by CLONE_VM and run as program(arg, err)
// (see apply_namespaces_in_child's ProgramFunction form).
int clone_program_under_pid1_in_child(int report_fd, const Pid1UserNs* userns, NsFailure* failure,
                                      ProgramFunction program, void* arg) noexcept;

}  // namespace corral
