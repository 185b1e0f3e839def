#include "corral/namespaces.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "corral/ns_template.hpp"
#include "corral/syscalls.hpp"

namespace corral {

// ---- user namespace (parent side) -----------------------------------------

namespace {

// One write(2) per file: the kernel refuses a map written in pieces.
Status write_proc_file(pid_t pid, const char* name, const std::string& text) {
  std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return Error::from_errno(errno, "user namespace: open " + path);
  ssize_t n = ::write(fd.get(), text.data(), text.size());
  std::string shown = text.substr(0, text.find('\n'));
  if (n < 0) return Error::from_errno(errno, "user namespace: write '" + shown + "' to " + path);
  if (static_cast<std::size_t>(n) != text.size())
    return Error(EIO, "user namespace: short write of '" + shown + "' to " + path);
  return {};
}

std::string map_line(unsigned inside, unsigned outside) {
  return std::to_string(inside) + " " + std::to_string(outside) + " 1\n";
}

}  // namespace

Status write_id_maps(pid_t child, const UserNsMap& map, bool deny_setgroups) {
  if (auto st = write_proc_file(child, "uid_map", map_line(map.inside_uid, map.outside_uid)); !st) return st;
  if (deny_setgroups)
    if (auto st = write_proc_file(child, "setgroups", "deny"); !st) return st;
  return write_proc_file(child, "gid_map", map_line(map.inside_gid, map.outside_gid));
}

// ---- sync pipe ----------------------------------------------------------------

Expected<SyncPipe> SyncPipe::create() {
  int fds[2];
  // CLOEXEC: neither end may reach the program.
  if (::pipe2(fds, O_CLOEXEC) != 0) return Error::from_errno(errno, "namespaces: sync pipe");
  SyncPipe p;
  p.read_.reset(fds[0]);
  p.write_.reset(fds[1]);
  return p;
}

Status SyncPipe::release() {
  read_.reset();
  if (!write_) return Error(EBADF, "namespaces: sync pipe already used");
  char byte = 1;
  ssize_t n;
  do {
    n = ::write(write_.get(), &byte, 1);
  } while (n < 0 && errno == EINTR);
  int err = errno;
  write_.reset();
  if (n != 1) return Error::from_errno(err, "namespaces: release the child");
  return {};
}

void SyncPipe::abandon() noexcept {
  read_.reset();
  write_.reset();
}

// Child side; async-signal-safe.
int wait_for_parent_in_child(int fd) noexcept {
  char byte;
  for (;;) {
    long n = sys::call(SYS_read, fd, reinterpret_cast<long>(&byte), 1);
    if (n == 1) return 0;
    if (n == 0) return ECANCELED;
    if (n != -EINTR) return sys::error_of(n);
  }
}

// ---- small child-side steps -------------------------------------------------

// Child side; async-signal-safe. The ifreq lives on the stack.
int bring_up_loopback_in_child() noexcept {
  long fd = sys::call(SYS_socket, AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return sys::error_of(fd);
  struct ifreq ifr;
  std::memset(&ifr, 0, sizeof ifr);
  ifr.ifr_name[0] = 'l';
  ifr.ifr_name[1] = 'o';
  long ret = sys::call(SYS_ioctl, fd, SIOCGIFFLAGS, reinterpret_cast<long>(&ifr));
  if (ret >= 0) {
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    ret = sys::call(SYS_ioctl, fd, SIOCSIFFLAGS, reinterpret_cast<long>(&ifr));
  }
  sys::call(SYS_close, fd);
  return sys::error_of(ret);
}

// Child side; async-signal-safe.
int set_hostname_in_child(const char* name, std::size_t len) noexcept {
  return sys::error_of(sys::call(SYS_sethostname, reinterpret_cast<long>(name), static_cast<long>(len)));
}

// Child side; async-signal-safe. PDEATHSIG is cleared by every change of
// credentials (commit_creds), so this comes after the last id switch. A
// parent that died before it sends no signal: ask its pidfd (readable once
// it has exited). Our parent is outside our pid namespace, so getppid()
// cannot tell (it is 0 for pid 1).
int die_with_parent_in_child(int parent_pidfd) noexcept {
  if (long ret = sys::call(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0); ret < 0) return sys::error_of(ret);
  struct pollfd alive = {parent_pidfd, POLLIN, 0};
  struct timespec now = {0, 0};
  long ready = sys::call(SYS_ppoll, reinterpret_cast<long>(&alive), 1, reinterpret_cast<long>(&now), 0, 0);
  if (ready < 0) return sys::error_of(ready);
  return ready > 0 ? ESRCH : 0;
}

// Child side; async-signal-safe. Raw calls: glibc's set*id would broadcast
// to the parent's threads.
int switch_ids_in_child(long gid, long uid, NsFailure* f) noexcept {
  long ret;
  if ((ret = sys::call(SYS_setresgid, gid, gid, gid)) < 0) {
    f->stage = NsStage::setgid;
    return f->err = sys::error_of(ret);
  }
  if ((ret = sys::call(SYS_setresuid, uid, uid, uid)) < 0) {
    f->stage = NsStage::setuid;
    return f->err = sys::error_of(ret);
  }
  return 0;
}

// ---- the combined spec ----------------------------------------------------------

namespace {

Status check_hostname(const std::string& name) {
  std::string who = "namespaces: hostname '" + name + "'";
  if (name.empty() || name.size() > 64) return Error::invalid(who + ": must be 1 to 64 characters");
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
    if (!ok) return Error::invalid(who + ": only letters, digits, '-' and '.' are allowed");
  }
  return {};
}

Status check_map(const UserNsMap& m, bool rootless) {
  constexpr unsigned kInvalid = static_cast<unsigned>(-1);
  if (m.inside_uid == kInvalid || m.inside_gid == kInvalid || m.outside_uid == kInvalid ||
      m.outside_gid == kInvalid)
    return Error::invalid("namespaces: user namespace map: id -1 is not a valid id");
  if (rootless) {
    uid_t euid = ::geteuid();
    gid_t egid = ::getegid();
    if (m.outside_uid != euid || m.outside_gid != egid)
      return Error(EPERM, "namespaces: rootless user namespace can map only our own ids " +
                              std::to_string(euid) + ":" + std::to_string(egid) + ", not " +
                              std::to_string(m.outside_uid) + ":" + std::to_string(m.outside_gid));
  } else if (m.outside_uid == 0 || m.outside_gid == 0) {
    return Error::invalid("namespaces: user namespace map: mapping the inside ids to host root (0) is refused");
  }
  return {};
}

struct FlagName {
  bool (NamespaceSpec::*on)() const;
  std::uint64_t flag;
  const char* name;
};
constexpr FlagName kFlags[] = {
    {&NamespaceSpec::pid, CLONE_NEWPID, "pid"},   {&NamespaceSpec::net, CLONE_NEWNET, "net"},
    {&NamespaceSpec::mount, CLONE_NEWNS, "mount"}, {&NamespaceSpec::ipc, CLONE_NEWIPC, "ipc"},
    {&NamespaceSpec::uts, CLONE_NEWUTS, "uts"},   {&NamespaceSpec::cgroup, CLONE_NEWCGROUP, "cgroup"},
};

}  // namespace

bool PreparedNamespaces::has_user() const noexcept { return flags_ & CLONE_NEWUSER; }
bool PreparedNamespaces::has_pid() const noexcept { return flags_ & CLONE_NEWPID; }

Expected<PreparedNamespaces> prepare_namespaces(const NamespaceSpec& spec) {
  PreparedNamespaces p;
  p.rootless_ = ::geteuid() != 0;
  std::string others;
  for (const auto& f : kFlags) {
    if (!(spec.*f.on)()) continue;
    p.flags_ |= f.flag;
    others += others.empty() ? "" : ", ";
    others += f.name;
  }
  if (spec.user()) {
    p.flags_ |= CLONE_NEWUSER;
  } else if (p.rootless_ && !others.empty()) {
    return Error(EPERM, "namespaces: not root (uid " + std::to_string(::geteuid()) + "): the " + others +
                            " namespaces need a user namespace");
  }

  if (spec.map()) {
    p.map_ = *spec.map();
  } else if (p.rootless_) {
    p.map_.outside_uid = ::geteuid();
    p.map_.outside_gid = ::getegid();
  }
  if (spec.user())
    if (auto st = check_map(p.map_, p.rootless_); !st) return std::move(st).error();
  if (spec.uts())
    if (auto st = check_hostname(spec.hostname()); !st) return std::move(st).error();
  p.hostname_ = spec.hostname();
  p.die_with_parent_ = spec.die_with_parent();
  if (p.die_with_parent_) {
    // The child's check that we did not die before its PDEATHSIG was set.
    long fd = sys::call(SYS_pidfd_open, ::getpid(), 0);
    if (fd < 0) return Error::from_errno(sys::error_of(fd), "namespaces: pidfd_open of ourselves (die_with_parent)");
    p.parent_pidfd_.reset(static_cast<int>(fd));
  }

  if (spec.mount()) {
    // proc(5): mounting proc needs CAP_SYS_ADMIN over the pid namespace's
    // owning user namespace; the host's pid namespace is not ours.
    if (spec.user() && !spec.pid() && spec.mounts().proc())
      return Error::invalid(
          "namespaces: a fresh /proc in a user namespace needs a pid namespace too (or mounts().proc(false))");
    EtcIdentity who;
    who.uid = spec.user() ? p.map_.inside_uid : ::geteuid();
    who.gid = spec.user() ? p.map_.inside_gid : ::getegid();
    who.hostname = spec.hostname();
    if (spec.use_template() && !p.rootless_ && spec.user() && spec.pid() && spec.net() && spec.mounts().binds().empty() &&
        spec.mounts().dev_binds().empty()) {
      // The per-run half and the spec's part of the base, without a look at
      // the host; the host stamp then finds the template (ns_template.hpp).
      // Without a record that holds, the host is scanned for the full base.
      auto split = prepare_split_mount_tree(spec.mounts(), who,
                                            spec.mounts().rootfs().empty() ? HostScan::skip : HostScan::full);
      if (!split) return split.error().context("namespaces");
      std::optional<NsTemplate> stamped;
      if (split->scanned_dirs.empty()) stamped = open_stamped_ns_template(split->fingerprint, spec.template_root());
      Expected<NsTemplate> tmpl = stamped ? Expected<NsTemplate>(std::move(*stamped)) : Error(ENOENT, "");
      if (!stamped) {
        const std::string skeleton = split->scanned_dirs.empty() ? split->fingerprint : std::string();
        const HostStampStart start = begin_host_stamp();
        if (!skeleton.empty()) split = prepare_split_mount_tree(spec.mounts(), who);
        if (!split) return split.error().context("namespaces");
        tmpl = open_ns_template(split->base, split->fingerprint, spec.template_root(), skeleton);
        if (tmpl && !skeleton.empty()) record_host_stamp(skeleton, split->scanned_dirs, start, *tmpl, spec.template_root());
      }
      Expected<UniqueFd> user = tmpl ? open_userns_template(UserNsIds{p.map_.inside_uid, p.map_.outside_uid,
                                                                      p.map_.inside_gid, p.map_.outside_gid},
                                                            spec.template_root())
                                     : Expected<UniqueFd>(tmpl.error());
      if (user) {
        p.template_dir_ = tmpl->dir;
        p.template_mnt_ = std::move(tmpl->mnt);
        p.template_net_ = std::move(tmpl->net);
        p.template_user_ = std::move(*user);
        p.workspace_fd_ = std::move(split->workspace_fd);
        p.tree_ = std::move(split->per_run);
        p.has_tree_ = true;
        p.flags_ &= ~static_cast<std::uint64_t>(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET);
      } else {
        p.template_error_ = user.error().message();
      }
    }
    if (!p.in_template()) {
      auto tree = prepare_mount_tree(spec.mounts(), who);
      if (!tree) return tree.error().context("namespaces");
      p.tree_ = std::move(tree).value();
      p.has_tree_ = true;
    }
  }
  // The child waits only for what the parent does after clone: the maps.
  // Without a user namespace at clone (none, or template mode, where pid 1
  // writes them) there is nothing to wait for.
  if (p.has_user()) {
    auto sync = SyncPipe::create();
    if (!sync) return std::move(sync).error();
    p.sync_ = std::move(sync).value();
  }
  return p;
}

Status PreparedNamespaces::finish_in_parent(pid_t child) {
  parent_pidfd_.reset();  // the child has its copy
  if (has_user()) {
    if (auto st = write_id_maps(child, map_, rootless_); !st) {
      sync_.abandon();
      return st.error().context("namespaces");
    }
    return sync_.release();
  }
  return {};
}

const char* ns_stage_name(NsStage stage) noexcept {
  switch (stage) {
    case NsStage::none: return "none";
    case NsStage::sync: return "wait for the parent (uid/gid maps)";
    case NsStage::setgroups: return "setgroups(0) (drop supplementary groups)";
    case NsStage::setgid: return "setresgid to the inside gid";
    case NsStage::setuid: return "setresuid to the inside uid";
    case NsStage::hostname: return "sethostname";
    case NsStage::loopback: return "bring up lo";
    case NsStage::mount_tree: return "mount tree";
    case NsStage::pid1: return "fork the program under pid 1";
    case NsStage::parent_death: return "prctl(PR_SET_PDEATHSIG)";
    case NsStage::template_enter: return "enter the namespace template (setns net, setns mnt, unshare mnt)";
    case NsStage::user_ns: return "setns into the user namespace template, in the program";
    case NsStage::pid1_drop: return "pid 1 drops to the run's host ids before the program goes on";
  }
  return "?";
}

Error PreparedNamespaces::error_for(const NsFailure& f) const {
  if (f.stage == NsStage::mount_tree) return tree_.error_for(f.mount).context("namespaces");
  return Error::from_errno(f.err, std::string("namespaces: ") + ns_stage_name(f.stage));
}

// Child side; async-signal-safe. Order matters: ids first (files the mount
// tree creates must belong to a mapped id, or the kernel refuses them with
// EOVERFLOW), the mount tree after the net/uts steps (they need nothing from
// the filesystem), /proc inside it (this process is already pid 1 of the
// new pid namespace, so the fresh proc shows only the run), the pid-1 split
// last so pid 1 and the program share the finished tree.
int apply_namespaces_in_child(const PreparedNamespaces& ns, int pid1_report_fd, NsFailure* failure) noexcept {
  return apply_namespaces_in_child(ns, pid1_report_fd, failure, nullptr, nullptr);
}

int apply_namespaces_in_child(const PreparedNamespaces& ns, int pid1_report_fd, NsFailure* failure,
                              ProgramFunction program, void* arg) noexcept {
  NsFailure local;
  NsFailure* f = failure ? failure : &local;
  auto fail = [f](NsStage stage, int err) {
    f->stage = stage;
    f->err = err;
    return err;
  };
  int err = 0;
  if (ns.sync_.read_fd() >= 0) {
    // The parent's end: if we kept it, a parent that dies would never give EOF.
    if (ns.sync_.write_fd() >= 0) sys::call(SYS_close, ns.sync_.write_fd());
    err = wait_for_parent_in_child(ns.sync_.read_fd());
    sys::call(SYS_close, ns.sync_.read_fd());
    if (err) return fail(NsStage::sync, err);
  }

  if (ns.in_template()) {
    // Still the host's root: enter the template's namespaces (owned by the
    // host's user namespace, so this must come before our own), copy its
    // mount namespace so nothing we mount reaches it or other runs, then
    // the per-run mounts, and the user namespace last, in the program.
    long ret;
    if ((ret = sys::call(SYS_setns, ns.template_net_.get(), CLONE_NEWNET)) < 0 ||
        (ret = sys::call(SYS_setns, ns.template_mnt_.get(), CLONE_NEWNS)) < 0 ||
        (ret = sys::call(SYS_unshare, CLONE_NEWNS)) < 0)
      return fail(NsStage::template_enter, sys::error_of(ret));
    sys::call(SYS_close, ns.template_net_.get());
    sys::call(SYS_close, ns.template_mnt_.get());
    if (ns.flags_ & CLONE_NEWUTS)
      if ((err = set_hostname_in_child(ns.hostname_.data(), ns.hostname_.size())))
        return fail(NsStage::hostname, err);
    if ((err = apply_mount_tree_in_child(ns.tree_, &f->mount))) return fail(NsStage::mount_tree, err);
    if (ns.workspace_fd_) sys::call(SYS_close, ns.workspace_fd_.get());
    // Root's supplementary groups must not reach pid 1 or the program.
    if ((ret = sys::call(SYS_setgroups, 0, 0)) < 0) return fail(NsStage::setgroups, sys::error_of(ret));
    Pid1UserNs u{ns.template_user_.get(), ns.map_.inside_uid, ns.map_.inside_gid, ns.map_.outside_uid,
                 ns.map_.outside_gid, ns.die_with_parent_ ? ns.parent_pidfd_.get() : -1,
                 ns.program_stack_, static_cast<long>(ns.program_stack_size_)};
    return program ? clone_program_under_pid1_in_child(pid1_report_fd, &u, f, program, arg)
                   : fork_program_under_pid1_in_child(pid1_report_fd, &u, f);
  }

  if (ns.has_user()) {
    long ret = 0;
    if (!ns.rootless_ && (ret = sys::call(SYS_setgroups, 0, 0)) < 0)
      return fail(NsStage::setgroups, sys::error_of(ret));
    if ((err = switch_ids_in_child(ns.map_.inside_gid, ns.map_.inside_uid, f))) return err;
  }
  // After the id switch, which clears it; pid 1 keeps it.
  if (ns.die_with_parent_) {
    err = die_with_parent_in_child(ns.parent_pidfd_.get());
    sys::call(SYS_close, ns.parent_pidfd_.get());
    if (err) return fail(NsStage::parent_death, err);
  }
  if (ns.flags_ & CLONE_NEWUTS) {
    if ((err = set_hostname_in_child(ns.hostname_.data(), ns.hostname_.size())))
      return fail(NsStage::hostname, err);
  }
  if (ns.flags_ & CLONE_NEWNET) {
    if ((err = bring_up_loopback_in_child())) return fail(NsStage::loopback, err);
  }
  if (ns.has_tree_) {
    if ((err = apply_mount_tree_in_child(ns.tree_, &f->mount))) return fail(NsStage::mount_tree, err);
  }
  if (ns.has_pid()) {
    if (program) return clone_program_under_pid1_in_child(pid1_report_fd, nullptr, f, program, arg);
    if ((err = fork_program_under_pid1_in_child(pid1_report_fd, nullptr, f))) return err;
  } else if (program) {
    return fail(NsStage::pid1, EINVAL);  // a program function needs the pid-1 split
  }
  return 0;
}

}  // namespace corral
