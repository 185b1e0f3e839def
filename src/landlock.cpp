#include "corral/landlock.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>

#include "corral/syscalls.hpp"

namespace corral {
namespace {

// Filesystem rights by the ABI that introduced them (Documentation/
// userspace-api/landlock.rst). ABI 1 is bits 0..12.
constexpr std::uint64_t kFsAbi1 = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1;
constexpr std::uint64_t kFsRefer = LANDLOCK_ACCESS_FS_REFER;        // ABI 2
constexpr std::uint64_t kFsTruncate = LANDLOCK_ACCESS_FS_TRUNCATE;  // ABI 3
constexpr std::uint64_t kFsIoctlDev = LANDLOCK_ACCESS_FS_IOCTL_DEV; // ABI 5

// Rights that make sense on a non-directory; the kernel refuses a
// path-beneath rule on a file that names any other right (EINVAL).
constexpr std::uint64_t kFsFileRights = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE |
                                        LANDLOCK_ACCESS_FS_READ_FILE | kFsTruncate | kFsIoctlDev;

// What the rest of the filesystem keeps so that programs still run.
// IOCTL_DEV is deliberately not among them: a device opened inside the
// sandbox (say /dev/tty) takes no ioctl beyond the few the kernel always
// allows, which closes TIOCSTI-style injection.
constexpr std::uint64_t kFsReadExec =
    LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;

constexpr std::uint64_t kNetTcp = LANDLOCK_ACCESS_NET_BIND_TCP | LANDLOCK_ACCESS_NET_CONNECT_TCP;

std::uint64_t fs_rights_for_abi(int abi) {
  std::uint64_t rights = kFsAbi1;
  if (abi >= 2) rights |= kFsRefer;
  if (abi >= 3) rights |= kFsTruncate;
  if (abi >= 5) rights |= kFsIoctlDev;
  return rights;
}

// The ruleset attribute grew with the ABI; an older kernel refuses the
// larger struct (E2BIG) when the extra fields are non-zero, and a newer one
// accepts the shorter size, so pass exactly what this ABI defines.
unsigned long attr_size_for_abi(int abi) {
  if (abi >= 6) return sizeof(sys::landlock_ruleset_attr_v6);
  if (abi >= 4) return 2 * sizeof(std::uint64_t);
  return sizeof(std::uint64_t);
}

std::string abi_text(int abi) { return "ABI " + std::to_string(abi); }

// A feature the ABI lacks: EOPNOTSUPP, named with both ABIs.
Error needs_abi(std::string_view what, int needed, int offered) {
  std::string msg = "landlock: ";
  msg += what;
  msg += " need";
  msg += (what.back() == 's' ? "" : "s");
  msg += " " + abi_text(needed) + ", this kernel offers " + abi_text(offered);
  if (offered == 0) msg += " (Landlock missing or disabled)";
  return Error(EOPNOTSUPP, std::move(msg));
}

Status add_port_rule(int ruleset_fd, int port, std::uint64_t access) {
  sys::landlock_net_port_attr rule{access, static_cast<std::uint64_t>(port)};
  long ret = sys::call(SYS_landlock_add_rule, ruleset_fd, CORRAL_LANDLOCK_RULE_NET_PORT,
                       reinterpret_cast<long>(&rule), 0);
  if (int err = sys::error_of(ret)) return Error::from_errno(err, "add rule");
  return {};
}

// Opens `path` with O_PATH (no read permission needed, follows symlinks)
// and adds a path-beneath rule granting `access` (narrowed to file rights
// when the path is not a directory). Raw syscalls only, no allocation: the
// parent's prepare() and the child's confine_writes_in_child share it.
// Returns 0 or a positive errno; *step says which call failed.
int add_path_raw(int ruleset_fd, const char* path, std::uint64_t access, const char** step) noexcept {
  *step = "open";
  long fd = sys::call(SYS_openat, AT_FDCWD, reinterpret_cast<long>(path), O_PATH | O_CLOEXEC);
  if (int err = sys::error_of(fd)) return err;
  struct stat st {};
  *step = "stat";
  int err = sys::error_of(sys::call(SYS_fstat, fd, reinterpret_cast<long>(&st)));
  if (err == 0) {
    if (!S_ISDIR(st.st_mode)) access &= kFsFileRights;
    *step = "add rule";
    landlock_path_beneath_attr rule{};
    rule.allowed_access = access;
    rule.parent_fd = static_cast<int>(fd);
    err = sys::error_of(
        sys::call(SYS_landlock_add_rule, ruleset_fd, LANDLOCK_RULE_PATH_BENEATH, reinterpret_cast<long>(&rule), 0));
  }
  sys::call(SYS_close, fd);
  return err;
}

// The same with an error that names the path's role (`what`) and the step.
Status allow_path(int ruleset_fd, const std::string& path, std::uint64_t access,
                  std::string_view what) {
  const char* step = "";
  int err = add_path_raw(ruleset_fd, path.c_str(), access, &step);
  if (err == 0) return {};
  if (std::string_view(step) == "open")
    return Error::from_errno(err, "landlock: open " + std::string(what) + " '" + path + "'");
  return Error::from_errno(err, "landlock: " + std::string(what) + " '" + path + "': " + step);
}

std::string join_ports(const std::vector<int>& ports) {
  if (ports.empty()) return "none";
  std::string out;
  for (int p : ports) {
    if (!out.empty()) out += ", ";
    out += std::to_string(p);
  }
  return out;
}

Status validate(const LandlockSpec& spec) {
  if (!spec.writes_confined() && !spec.write_fds().empty())
    return Error::invalid("landlock: write path " + spec.write_fds().front().second +
                          " given while confine_writes is off");
  if (!spec.writes_confined() && !spec.write_paths().empty())
    return Error::invalid("landlock: write path '" + spec.write_paths().front() +
                          "' given while confine_writes is off");
  if (!spec.tcp_restricted() &&
      (!spec.tcp_bind_ports().empty() || !spec.tcp_connect_ports().empty()))
    return Error::invalid("landlock: TCP allow-list given while restrict_tcp is off");
  for (const auto& path : spec.write_paths())
    if (path.empty()) return Error::invalid("landlock: empty write path");
  for (const auto* ports : {&spec.tcp_bind_ports(), &spec.tcp_connect_ports()})
    for (int port : *ports)
      if (port < 0 || port > 65535)
        return Error::invalid("landlock: TCP port " + std::to_string(port) +
                              " out of range (0..65535)");
  if (!spec.writes_confined() && !spec.tcp_restricted() && !spec.abstract_unix_scoped() &&
      !spec.signals_scoped() && !spec.wants_own_domain())
    return Error::invalid(
        "landlock: nothing to enforce (confine_writes, restrict_tcp, scoping and own_domain all off)");
  return {};
}

// The first thing the spec asks that `abi` cannot give, as an error.
Status check_abi(const LandlockSpec& spec, int abi) {
  if (spec.writes_confined() && abi < 1) return needs_abi("write confinement", 1, abi);
  if (spec.wants_own_domain() && abi < 1) return needs_abi("a domain of its own", 1, abi);
  if (spec.tcp_restricted() && abi < 4) return needs_abi("TCP port rules", 4, abi);
  if (spec.abstract_unix_scoped() && abi < 6)
    return needs_abi("abstract unix socket scoping", 6, abi);
  if (spec.signals_scoped() && abi < 6) return needs_abi("signal scoping", 6, abi);
  return {};
}

}  // namespace

int landlock_abi() noexcept {
  // -1: not probed yet. Racing first calls both probe and store the same
  // answer, so relaxed ordering is enough.
  static std::atomic<int> cached{-1};
  int abi = cached.load(std::memory_order_relaxed);
  if (abi >= 0) return abi;
  long ret = sys::call(SYS_landlock_create_ruleset, 0, 0, LANDLOCK_CREATE_RULESET_VERSION);
  abi = ret > 0 ? static_cast<int>(ret) : 0;  // ENOSYS: no Landlock; EOPNOTSUPP: disabled
  cached.store(abi, std::memory_order_relaxed);
  return abi;
}

ContentClaim landlock_claim_for_abi(int abi) {
  if (abi >= 3) return ContentClaim::hard_content;
  if (abi >= 1) return ContentClaim::hard_content_except_truncate;
  return ContentClaim::unsupported;
}

ContentClaim landlock_claim() { return landlock_claim_for_abi(landlock_abi()); }

std::string_view to_string(ContentClaim claim) {
  switch (claim) {
    case ContentClaim::hard_content: return "hard_content";
    case ContentClaim::hard_content_except_truncate: return "hard_content_except_truncate";
    case ContentClaim::unsupported: return "unsupported";
  }
  return "unsupported";
}

LandlockSpec& LandlockSpec::allow_writes(std::string path) {
  write_paths_.push_back(std::move(path));
  return *this;
}
LandlockSpec& LandlockSpec::allow_writes_beneath(int dir_fd, std::string name) {
  write_fds_.push_back({dir_fd, std::move(name)});
  return *this;
}
LandlockSpec& LandlockSpec::confine_writes(bool on) {
  confine_writes_ = on;
  return *this;
}
LandlockSpec& LandlockSpec::restrict_tcp(bool on) {
  restrict_tcp_ = on;
  return *this;
}
LandlockSpec& LandlockSpec::tcp_bind_allow(int port) {
  bind_ports_.push_back(port);
  restrict_tcp_ = true;
  return *this;
}
LandlockSpec& LandlockSpec::tcp_connect_allow(int port) {
  connect_ports_.push_back(port);
  restrict_tcp_ = true;
  return *this;
}
LandlockSpec& LandlockSpec::scope_abstract_unix(bool on) {
  scope_abstract_unix_ = on;
  return *this;
}
LandlockSpec& LandlockSpec::scope_signals(bool on) {
  scope_signals_ = on;
  return *this;
}
LandlockSpec& LandlockSpec::own_domain(bool on) {
  own_domain_ = on;
  return *this;
}

std::string LandlockEnforced::describe() const {
  std::string out = "landlock " + abi_text(abi) + ": ";
  if (writes_confined) {
    out += "writes confined to ";
    if (write_paths.empty()) out += "nothing";
    for (std::size_t i = 0; i < write_paths.size(); ++i) out += (i ? ", " : "") + write_paths[i];
    out += " (" + std::string(to_string(claim)) + ")";
  } else {
    out += "writes not confined";
  }
  if (tcp_restricted())
    out += "; tcp bind: " + join_ports(tcp_bind_ports) + "; tcp connect: " +
           join_ports(tcp_connect_ports);
  if (scoped) {
    std::string names;
    if (scoped & LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET) names += "abstract-unix";
    if (scoped & LANDLOCK_SCOPE_SIGNAL) names += names.empty() ? "signals" : ", signals";
    out += "; scoped: " + names;
  }
  if (!writes_confined && !tcp_restricted() && !scoped && handled_fs) out += "; a domain of its own";
  return out;
}

Expected<LandlockRuleset> prepare(const LandlockSpec& spec) {
  return prepare_for_abi(spec, landlock_abi());
}

Expected<LandlockRuleset> prepare_for_abi(const LandlockSpec& spec, int max_abi) {
  if (auto s = validate(spec); !s) return std::move(s).error();
  int abi = std::min(max_abi < 0 ? 0 : max_abi, landlock_abi());
  if (auto s = check_abi(spec, abi); !s) return std::move(s).error();

  LandlockRuleset rs;
  LandlockEnforced& e = rs.enforced_;
  e.abi = abi;
  e.claim = landlock_claim_for_abi(abi);
  e.writes_confined = spec.writes_confined();
  if (e.writes_confined) {
    e.write_paths = spec.write_paths();
    e.handled_fs = fs_rights_for_abi(abi);
  }
  if (spec.tcp_restricted()) {
    e.handled_net = kNetTcp;
    e.tcp_bind_ports = spec.tcp_bind_ports();
    e.tcp_connect_ports = spec.tcp_connect_ports();
  }
  if (spec.abstract_unix_scoped()) e.scoped |= LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET;
  if (spec.signals_scoped()) e.scoped |= LANDLOCK_SCOPE_SIGNAL;
  // The kernel refuses a ruleset that handles nothing.
  if (spec.wants_own_domain() && !e.handled_fs && !e.handled_net && !e.scoped)
    e.handled_fs = LANDLOCK_ACCESS_FS_MAKE_BLOCK;

  sys::landlock_ruleset_attr_v6 attr{e.handled_fs, e.handled_net, e.scoped};
  // The kernel returns the ruleset fd with O_CLOEXEC already set.
  long ret = sys::call(SYS_landlock_create_ruleset, reinterpret_cast<long>(&attr),
                       static_cast<long>(attr_size_for_abi(abi)), 0);
  if (int err = sys::error_of(ret)) return Error::from_errno(err, "landlock: create ruleset");
  rs.fd_.reset(static_cast<int>(ret));

  if (e.writes_confined) {
    if (auto s = allow_path(rs.fd(), "/", kFsReadExec & e.handled_fs, "read-only root"); !s)
      return std::move(s).error();
    for (const auto& path : e.write_paths)
      if (auto s = allow_path(rs.fd(), path, e.handled_fs, "write path"); !s)
        return std::move(s).error();
    for (const auto& [fd, name] : spec.write_fds()) {
      landlock_path_beneath_attr rule{};
      rule.allowed_access = e.handled_fs;
      rule.parent_fd = fd;
      long ret = sys::call(SYS_landlock_add_rule, rs.fd(), LANDLOCK_RULE_PATH_BENEATH, reinterpret_cast<long>(&rule), 0);
      if (int err = sys::error_of(ret)) return Error::from_errno(err, "landlock: write path " + name + ": add rule");
      e.write_paths.push_back(name);
    }
  }
  for (int port : e.tcp_bind_ports)
    if (auto s = add_port_rule(rs.fd(), port, LANDLOCK_ACCESS_NET_BIND_TCP); !s)
      return s.error().context("landlock: TCP bind port " + std::to_string(port));
  for (int port : e.tcp_connect_ports)
    if (auto s = add_port_rule(rs.fd(), port, LANDLOCK_ACCESS_NET_CONNECT_TCP); !s)
      return s.error().context("landlock: TCP connect port " + std::to_string(port));
  return rs;
}

int confine_writes_in_child(const char* const* paths, std::size_t count) noexcept {
  // What prepare() builds for LandlockSpec().allow_writes(paths...): the
  // same rights for the running ABI, the same read-only root, the same
  // narrowing of a file's rule; here without allocating, for a preexec hook.
  if (count > 0 && paths == nullptr) return EINVAL;
  const int abi = landlock_abi();
  if (abi < 1) return EOPNOTSUPP;
  sys::landlock_ruleset_attr_v6 attr{fs_rights_for_abi(abi), 0, 0};
  long ruleset = sys::call(SYS_landlock_create_ruleset, reinterpret_cast<long>(&attr),
                           static_cast<long>(attr_size_for_abi(abi)), 0);
  if (int err = sys::error_of(ruleset)) return err;
  const char* step = "";
  int err = add_path_raw(static_cast<int>(ruleset), "/", kFsReadExec & attr.handled_access_fs, &step);
  for (std::size_t i = 0; err == 0 && i < count; ++i)
    err = paths[i] == nullptr ? EINVAL : add_path_raw(static_cast<int>(ruleset), paths[i], attr.handled_access_fs, &step);
  if (err == 0) err = sys::error_of(sys::call(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
  if (err == 0) err = sys::error_of(sys::call(SYS_landlock_restrict_self, ruleset, 0));
  sys::call(SYS_close, ruleset);
  return err;
}

int apply_landlock_in_child(const LandlockRuleset& ruleset) noexcept {
  // Runs in the child between clone and exec: raw syscalls only, nothing
  // that touches errno or allocates. no_new_privs is what lets an
  // unprivileged process restrict itself (and keeps setuid binaries from
  // escaping the domain); it is inherited across exec and irreversible.
  if (ruleset.fd() < 0) return EBADF;
  if (int err = sys::error_of(sys::call(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))) return err;
  return sys::error_of(sys::call(SYS_landlock_restrict_self, ruleset.fd(), 0));
}

}  // namespace corral
