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

// ---- pid 1 ----------------------------------------------------------------------

namespace {

constexpr std::uint64_t sigbit(int sig) { return 1ull << (sig - 1); }
// What pid 1 takes synchronously: SIGCHLD to reap, the rest to forward.
// The kernel's sigset is 64 bits; rt_sig* calls get its size, 8.
constexpr std::uint64_t kPid1Signals = sigbit(SIGCHLD) | sigbit(SIGTERM) | sigbit(SIGINT) | sigbit(SIGHUP) |
                                       sigbit(SIGQUIT) | sigbit(SIGUSR1) | sigbit(SIGUSR2);
constexpr long kSigsetSize = 8;

[[noreturn]] void exit_now(int code) noexcept {
  for (;;) sys::call(SYS_exit_group, code);
}

// pid 1 keeps nothing it does not need: the program's pipes must see EOF
// when the program and its descendants are gone (and an exec-error pipe
// must not be held open by a process that never execs); no capabilities in
// the namespace; not dumpable, so the program (same uid) cannot ptrace it
// or read its memory through /proc.
void harden_pid1(int report_fd) noexcept {
  if (report_fd > 0) sys::call(SYS_close_range, 0, report_fd - 1, 0);
  sys::call(SYS_close_range, report_fd < 0 ? 0 : report_fd + 1, ~0u, 0);
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
  std::memset(data, 0, sizeof data);
  sys::call(SYS_capset, reinterpret_cast<long>(&hdr), reinterpret_cast<long>(data));
  sys::call(SYS_prctl, PR_SET_DUMPABLE, 0, 0, 0, 0);
  sys::call(SYS_prctl, PR_SET_NAME, reinterpret_cast<long>("corral-init"), 0, 0, 0);
}

[[noreturn]] void finish_pid1(int status, int report_fd) noexcept {
  if (report_fd >= 0) {
    Pid1Report report{kPid1ReportMagic, status};
    sys::write_all(report_fd, &report, sizeof report);
  }
  int code = 255;
  if (WIFEXITED(status)) code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) code = kPid1SignalExitBase + WTERMSIG(status);
  exit_now(code);
}

// Reap everything that has ended; finish when the program is among them.
void reap_pid1(pid_t program, int report_fd, long options) noexcept {
  int status = 0;
  long pid;
  while ((pid = sys::call(SYS_wait4, -1, reinterpret_cast<long>(&status), options | __WALL, 0)) > 0) {
    if (pid == program) finish_pid1(status, report_fd);
    if (!(options & WNOHANG)) return;
  }
}

[[noreturn]] void pid1_loop(pid_t program, int report_fd) noexcept {
  siginfo_t info;
  for (;;) {
    long sig = sys::call(SYS_rt_sigtimedwait, reinterpret_cast<long>(&kPid1Signals),
                         reinterpret_cast<long>(&info), 0, kSigsetSize);
    if (sig == SIGCHLD) {
      // SIGCHLDs coalesce: one wakeup reaps all; a child ending after the
      // last wait4 raises a fresh pending SIGCHLD.
      reap_pid1(program, report_fd, WNOHANG);
    } else if (sig > 0) {
      sys::call(SYS_kill, program, sig);
    } else if (sig != -EINTR) {
      // Should not happen; do not spin. Blocking reaping still ends us.
      reap_pid1(program, report_fd, 0);
    }
  }
}

}  // namespace

// Child side; async-signal-safe. The signals pid 1 handles are blocked
// before the fork, so none can be lost between fork and the wait loop (an
// init ignores signals it has no handler for unless they are blocked:
// blocked ones stay pending and rt_sigtimedwait collects them).
int fork_program_under_pid1_in_child(int report_fd) noexcept {
  std::uint64_t old_mask = 0;
  long ret = sys::call(SYS_rt_sigprocmask, SIG_BLOCK, reinterpret_cast<long>(&kPid1Signals),
                       reinterpret_cast<long>(&old_mask), kSigsetSize);
  if (ret < 0) return sys::error_of(ret);
  long pid = sys::call(SYS_clone, SIGCHLD, 0, 0, 0, 0);
  if (pid <= 0) {
    sys::call(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&old_mask), 0, kSigsetSize);
    if (pid == 0 && report_fd >= 0) sys::call(SYS_close, report_fd);
    return sys::error_of(pid);
  }
  harden_pid1(report_fd);
  pid1_loop(static_cast<pid_t>(pid), report_fd);
}

namespace {

// Template mode: what the program and pid 1 need for the user namespace the
// program makes itself (see NamespaceSpec::use_template).
struct UserNsStep {
  const char* uid_map;
  long uid_len;
  const char* gid_map;
  long gid_len;
  long inside_uid, inside_gid, outside_uid, outside_gid;
  int parent_pidfd;  // die_with_parent: a pidfd of the supervisor, else -1
};

// "/proc/<pid>/<name>" into buf (64 bytes); child-safe.
void proc_path_in_child(char* buf, long pid, const char* name) noexcept {
  const char prefix[] = "/proc/";
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + pid % 10);
    pid /= 10;
  } while (pid > 0 && n < 20);
  int i = 0;
  for (const char* c = prefix; *c; ++c) buf[i++] = *c;
  while (n > 0) buf[i++] = digits[--n];
  buf[i++] = '/';
  for (const char* c = name; *c && i < 62; ++c) buf[i++] = *c;
  buf[i] = 0;
}

int write_proc_in_child(long pid, const char* name, const char* data, long len) noexcept {
  char path[64];
  proc_path_in_child(path, pid, name);
  long fd = sys::call(SYS_openat, AT_FDCWD, reinterpret_cast<long>(path), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return sys::error_of(fd);
  long n = sys::call(SYS_write, fd, reinterpret_cast<long>(data), len);
  sys::call(SYS_close, fd);
  if (n < 0) return sys::error_of(n);
  return n == len ? 0 : EIO;
}

int read_int_in_child(int fd, int fallback) noexcept {
  int v = fallback;
  long n;
  while ((n = sys::call(SYS_read, fd, reinterpret_cast<long>(&v), sizeof v)) == -EINTR) {
  }
  return n == static_cast<long>(sizeof v) ? v : fallback;
}

// pid 1 in template mode: still the host's root (it made the mounts), so it
// writes the maps of the user namespace the program has just made, then
// becomes the run's outside ids and, with die_with_parent, sets its
// PDEATHSIG and checks the supervisor is still there.
[[noreturn]] void pid1_map_then_loop(pid_t program, int report_fd, int ready, int go, const UserNsStep& u) noexcept {
  int answer = read_int_in_child(ready, ECANCELED);
  sys::call(SYS_close, ready);
  const bool made = answer == 0;
  if (made) answer = write_proc_in_child(program, "uid_map", u.uid_map, u.uid_len);
  if (made && answer == 0) answer = write_proc_in_child(program, "gid_map", u.gid_map, u.gid_len);
  // The drop comes before the program is let go, so no code of the
  // program's ever runs beside a host-root pid 1. Without it pid 1 ends
  // (and the pid namespace with it); the program then reads EOF.
  if (sys::call(SYS_setresgid, u.outside_gid, u.outside_gid, u.outside_gid) < 0 ||
      sys::call(SYS_setresuid, u.outside_uid, u.outside_uid, u.outside_uid) < 0)
    exit_now(kPid1SignalExitBase + SIGKILL);
  if (u.parent_pidfd >= 0) {
    struct pollfd alive = {u.parent_pidfd, POLLIN, 0};
    struct timespec now = {0, 0};
    if (sys::call(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 ||
        sys::call(SYS_ppoll, reinterpret_cast<long>(&alive), 1, reinterpret_cast<long>(&now), 0, 0) != 0)
      exit_now(kPid1SignalExitBase + SIGKILL);
  }
  if (made) sys::write_all(go, &answer, sizeof answer);
  sys::call(SYS_close, go);
  harden_pid1(report_fd);
  pid1_loop(program, report_fd);
}

// The program's side: its own user namespace, the maps from pid 1, then the
// inside ids (which keep its capabilities there: the inside 0 is unmapped;
// the program's later steps drop them).
int program_userns_in_child(int ready, int go, const UserNsStep& u, NsFailure* f) noexcept {
  int err = sys::error_of(sys::call(SYS_unshare, CLONE_NEWUSER));
  sys::write_all(ready, &err, sizeof err);
  sys::call(SYS_close, ready);
  if (err) {
    sys::call(SYS_close, go);
    f->stage = NsStage::user_ns;
    return f->err = err;
  }
  int answer = read_int_in_child(go, ECANCELED);
  sys::call(SYS_close, go);
  if (answer) {
    f->stage = NsStage::id_maps;
    return f->err = answer;
  }
  long ret;
  if ((ret = sys::call(SYS_setresgid, u.inside_gid, u.inside_gid, u.inside_gid)) < 0) {
    f->stage = NsStage::setgid;
    return f->err = sys::error_of(ret);
  }
  if ((ret = sys::call(SYS_setresuid, u.inside_uid, u.inside_uid, u.inside_uid)) < 0) {
    f->stage = NsStage::setuid;
    return f->err = sys::error_of(ret);
  }
  return 0;
}

int fork_program_with_userns_in_child(int report_fd, const UserNsStep& u, NsFailure* f) noexcept {
  int ready[2], go[2];
  long ret = sys::call(SYS_pipe2, reinterpret_cast<long>(ready), O_CLOEXEC);
  if (ret >= 0 && (ret = sys::call(SYS_pipe2, reinterpret_cast<long>(go), O_CLOEXEC)) < 0) {
    sys::call(SYS_close, ready[0]);
    sys::call(SYS_close, ready[1]);
  }
  if (ret < 0) {
    f->stage = NsStage::pid1;
    return f->err = sys::error_of(ret);
  }
  std::uint64_t old_mask = 0;
  ret = sys::call(SYS_rt_sigprocmask, SIG_BLOCK, reinterpret_cast<long>(&kPid1Signals),
                  reinterpret_cast<long>(&old_mask), kSigsetSize);
  long pid = ret < 0 ? ret : sys::call(SYS_clone, SIGCHLD, 0, 0, 0, 0);
  if (pid <= 0) {
    sys::call(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&old_mask), 0, kSigsetSize);
    if (pid < 0) {
      for (int fd : {ready[0], ready[1], go[0], go[1]}) sys::call(SYS_close, fd);
      f->stage = NsStage::pid1;
      return f->err = sys::error_of(pid);
    }
    if (report_fd >= 0) sys::call(SYS_close, report_fd);
    sys::call(SYS_close, ready[0]);
    sys::call(SYS_close, go[1]);
    return program_userns_in_child(ready[1], go[0], u, f);
  }
  sys::call(SYS_close, ready[1]);
  sys::call(SYS_close, go[0]);
  pid1_map_then_loop(static_cast<pid_t>(pid), report_fd, ready[0], go[1], u);
}

}  // namespace

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
    if (spec.use_template() && !p.rootless_ && spec.user() && spec.pid() && spec.net() && spec.mounts().binds().empty()) {
      auto split = prepare_split_mount_tree(spec.mounts(), who);
      if (!split) return split.error().context("namespaces");
      auto tmpl = open_ns_template(split->base, split->fingerprint, spec.template_root());
      if (tmpl) {
        p.template_dir_ = tmpl->dir;
        p.template_mnt_ = std::move(tmpl->mnt);
        p.template_net_ = std::move(tmpl->net);
        p.workspace_fd_ = std::move(split->workspace_fd);
        p.tree_ = std::move(split->per_run);
        p.has_tree_ = true;
        p.flags_ &= ~static_cast<std::uint64_t>(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET);
        p.uid_map_line_ = map_line(p.map_.inside_uid, p.map_.outside_uid);
        p.gid_map_line_ = map_line(p.map_.inside_gid, p.map_.outside_gid);
      } else {
        p.template_error_ = tmpl.error().message();
      }
    }
    if (!p.in_template()) {
      auto tree = prepare_mount_tree(spec.mounts(), who);
      if (!tree) return tree.error().context("namespaces");
      p.tree_ = std::move(tree).value();
      p.has_tree_ = true;
    }
  }
  auto sync = SyncPipe::create();
  if (!sync) return std::move(sync).error();
  p.sync_ = std::move(sync).value();
  return p;
}

Status PreparedNamespaces::finish_in_parent(pid_t child) {
  parent_pidfd_.reset();  // the child has its copy
  if (has_user()) {
    if (auto st = write_id_maps(child, map_, rootless_); !st) {
      sync_.abandon();
      return st.error().context("namespaces");
    }
  }
  return sync_.release();
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
    case NsStage::user_ns: return "unshare(CLONE_NEWUSER) in the program";
    case NsStage::id_maps: return "pid 1 writes the program's uid/gid maps";
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
  NsFailure local;
  NsFailure* f = failure ? failure : &local;
  auto fail = [f](NsStage stage, int err) {
    f->stage = stage;
    f->err = err;
    return err;
  };
  // The parent's end: if we kept it, a parent that dies would never give EOF.
  if (ns.sync_.write_fd() >= 0) sys::call(SYS_close, ns.sync_.write_fd());
  int err = wait_for_parent_in_child(ns.sync_.read_fd());
  sys::call(SYS_close, ns.sync_.read_fd());
  if (err) return fail(NsStage::sync, err);

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
    sys::call(SYS_close, ns.workspace_fd_.get());
    // Root's supplementary groups must not reach pid 1 or the program.
    if ((ret = sys::call(SYS_setgroups, 0, 0)) < 0) return fail(NsStage::setgroups, sys::error_of(ret));
    UserNsStep u{ns.uid_map_line_.data(), static_cast<long>(ns.uid_map_line_.size()),
                 ns.gid_map_line_.data(), static_cast<long>(ns.gid_map_line_.size()),
                 ns.map_.inside_uid, ns.map_.inside_gid, ns.map_.outside_uid, ns.map_.outside_gid,
                 ns.die_with_parent_ ? ns.parent_pidfd_.get() : -1};
    return fork_program_with_userns_in_child(pid1_report_fd, u, f);
  }

  if (ns.has_user()) {
    // Raw calls: glibc's set*id would broadcast to the parent's threads.
    long ret = 0;
    if (!ns.rootless_ && (ret = sys::call(SYS_setgroups, 0, 0)) < 0)
      return fail(NsStage::setgroups, sys::error_of(ret));
    long g = ns.map_.inside_gid, u = ns.map_.inside_uid;
    if ((ret = sys::call(SYS_setresgid, g, g, g)) < 0) return fail(NsStage::setgid, sys::error_of(ret));
    if ((ret = sys::call(SYS_setresuid, u, u, u)) < 0) return fail(NsStage::setuid, sys::error_of(ret));
  }
  // After the id switch, which clears it (commit_creds); pid 1 keeps it.
  if (ns.die_with_parent_) {
    if (long ret = sys::call(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0); ret < 0)
      return fail(NsStage::parent_death, sys::error_of(ret));
    // A parent that died before that line sends no signal: ask its pidfd
    // (readable once it has exited). Our parent is outside our pid
    // namespace, so getppid() cannot tell (it is 0 for pid 1).
    struct pollfd alive = {ns.parent_pidfd_.get(), POLLIN, 0};
    struct timespec now = {0, 0};
    long ready = sys::call(SYS_ppoll, reinterpret_cast<long>(&alive), 1, reinterpret_cast<long>(&now), 0, 0);
    sys::call(SYS_close, ns.parent_pidfd_.get());
    if (ready < 0) return fail(NsStage::parent_death, sys::error_of(ready));
    if (ready > 0) return fail(NsStage::parent_death, ESRCH);
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
    if ((err = fork_program_under_pid1_in_child(pid1_report_fd))) return fail(NsStage::pid1, err);
  }
  return 0;
}

}  // namespace corral
