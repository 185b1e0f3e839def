// Landlock: confine where a program may write, which TCP ports it may bind
// or connect to, and whether it may reach abstract unix sockets or signal
// processes outside its sandbox.
//
// Describe (LandlockSpec) -> prepare in the parent (LandlockRuleset: a
// ruleset fd with its rules) -> apply in the child
// (apply_landlock_in_child: no_new_privs + landlock_restrict_self).
//
// Best effort, visibly (the kernel's samples/landlock/sandboxer.c idea): the
// ruleset handles every filesystem right the running kernel's ABI knows and
// drops the ones it lacks; what that leaves is recorded in
// LandlockEnforced. Something the ABI cannot give at all (TCP rules below
// ABI 4, scoping below ABI 6, anything when Landlock is off) is an Error,
// never a silent no-op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "corral/fd.hpp"
#include "corral/status.hpp"

namespace corral {

// The Landlock ABI version the running kernel offers, 0 when the kernel has
// no Landlock or it is disabled (not in the `lsm=` list). Probed once and
// cached; async-signal-safe (a raw syscall and a lock-free atomic).
int landlock_abi() noexcept;

// What "writes are confined" means on a given ABI.
enum class ContentClaim {
  hard_content,                  // ABI >= 3: no write, create, remove or truncate outside the write set
  hard_content_except_truncate,  // ABI 1-2: truncate(2) / O_TRUNC outside the write set still works
  unsupported,                   // no Landlock: writes cannot be confined
};

ContentClaim landlock_claim();  // for landlock_abi()
ContentClaim landlock_claim_for_abi(int abi);
std::string_view to_string(ContentClaim claim);

// What to enforce. Setters only record; prepare() validates and fails with
// the first problem, naming it.
//
// Defaults: writes confined with an empty write set (nothing may be written,
// created, removed or truncated anywhere); reads and execution allowed
// everywhere; TCP and scoping untouched.
class LandlockSpec {
 public:
  // Add a directory (everything beneath it) or a single file to the write
  // set: read, write, create, remove, rename, truncate. Repeatable; the path
  // is opened by prepare(), relative to the parent's cwd.
  LandlockSpec& allow_writes(std::string path);
  // The same for a directory given as an fd (a detached mount's root, which
  // has no path yet: Landlock rules name inodes, so a tmpfs mounted later
  // over some path needs its own root named, not the path's inode it
  // covers). The fd stays the caller's and must stay open until prepare();
  // `name` is what describe() shows ("/dev/shm (the run's own tmpfs)").
  LandlockSpec& allow_writes_beneath(int dir_fd, std::string name);
  // false: leave the filesystem alone (only TCP/scoping). Contradicts a
  // non-empty write set; prepare() refuses the pair.
  LandlockSpec& confine_writes(bool on);
  // Restrict TCP bind(2)/connect(2) to allow-listed ports (ABI >= 4). An
  // empty allow-list with restrict_tcp(true) forbids TCP bind and connect
  // altogether. Adding a port turns restriction on; restrict_tcp(false) with
  // ports listed is refused by prepare(). Ports are 0..65535.
  LandlockSpec& restrict_tcp(bool on);
  LandlockSpec& tcp_bind_allow(int port);
  LandlockSpec& tcp_connect_allow(int port);
  // ABI >= 6: no connecting to abstract unix sockets created outside the
  // sandbox / no signals to processes outside it.
  LandlockSpec& scope_abstract_unix(bool on);
  LandlockSpec& scope_signals(bool on);
  // A domain of its own even when nothing above is asked (any ABI): the
  // kernel refuses ptrace, /proc/PID/mem and the like from inside a
  // domain to any process outside it. The ruleset then handles only
  // LANDLOCK_ACCESS_FS_MAKE_BLOCK, allowed nowhere (a user namespace
  // refuses mknod of a block device anyway).
  LandlockSpec& own_domain(bool on);

  const std::vector<std::string>& write_paths() const { return write_paths_; }
  const std::vector<std::pair<int, std::string>>& write_fds() const { return write_fds_; }
  bool writes_confined() const { return confine_writes_; }
  bool tcp_restricted() const { return restrict_tcp_; }
  const std::vector<int>& tcp_bind_ports() const { return bind_ports_; }
  const std::vector<int>& tcp_connect_ports() const { return connect_ports_; }
  bool abstract_unix_scoped() const { return scope_abstract_unix_; }
  bool signals_scoped() const { return scope_signals_; }
  bool wants_own_domain() const { return own_domain_; }

 private:
  std::vector<std::string> write_paths_;
  std::vector<std::pair<int, std::string>> write_fds_;
  std::vector<int> bind_ports_;
  std::vector<int> connect_ports_;
  bool confine_writes_ = true;
  bool restrict_tcp_ = false;
  bool scope_abstract_unix_ = false;
  bool scope_signals_ = false;
  bool own_domain_ = false;
};

// What a prepared ruleset enforces, for results and `corral enforcement`.
struct LandlockEnforced {
  int abi = 0;                          // the ABI the ruleset was built for
  ContentClaim claim = ContentClaim::unsupported;  // of write confinement at that ABI
  bool writes_confined = false;         // when false, `claim` says what it *would* be
  std::vector<std::string> write_paths;
  std::uint64_t handled_fs = 0;         // LANDLOCK_ACCESS_FS_* handled by the ruleset
  std::uint64_t handled_net = 0;        // LANDLOCK_ACCESS_NET_*
  std::uint64_t scoped = 0;             // LANDLOCK_SCOPE_*
  std::vector<int> tcp_bind_ports;
  std::vector<int> tcp_connect_ports;

  bool tcp_restricted() const { return handled_net != 0; }
  // "landlock ABI 7: writes confined to /a, /b (hard_content); tcp bind: none;
  //  tcp connect: 443; scoped: abstract-unix, signals"
  std::string describe() const;
};

// A prepared ruleset: owns the Landlock ruleset fd (CLOEXEC, so a program
// exec'd by the child does not inherit it). Move-only.
class LandlockRuleset {
 public:
  int fd() const noexcept { return fd_.get(); }
  const LandlockEnforced& enforced() const { return enforced_; }
  int abi() const { return enforced_.abi; }
  ContentClaim claim() const { return enforced_.claim; }
  std::string describe() const { return enforced_.describe(); }

 private:
  friend Expected<LandlockRuleset> prepare_for_abi(const LandlockSpec&, int);
  UniqueFd fd_;
  LandlockEnforced enforced_;
};

// Parent side: validate the spec, create the ruleset for landlock_abi() and
// add its rules. Errors name the step and what is wrong:
// "landlock: open write path '/nope': No such file or directory",
// "landlock: TCP port rules need ABI 4, this kernel offers ABI 3".
Expected<LandlockRuleset> prepare(const LandlockSpec& spec);
// The same, built as if the kernel offered at most ABI `max_abi` (the lower
// of it and landlock_abi()): pins behaviour across kernels, and lets tests
// check what an older kernel would refuse or leave open.
Expected<LandlockRuleset> prepare_for_abi(const LandlockSpec& spec, int max_abi);

// Child side, between clone and exec (a CLONE_VM child too): raw
// prctl(PR_SET_NO_NEW_PRIVS, 1) then landlock_restrict_self(fd, 0).
// Async-signal-safe: raw syscalls only, no allocation. Returns 0 or a
// positive errno. The ruleset fd stays open (CLOEXEC closes it at exec).
int apply_landlock_in_child(const LandlockRuleset& ruleset) noexcept;

// Child side, whole: prepare and apply in one call without allocating, for
// a preexec hook after fork in a multi-threaded program (the C ABI's
// corral_confine_writes). The ruleset is the one prepare() builds for
// LandlockSpec with `paths` as its write set — the running ABI's rights, a
// read-only root, a file's rule narrowed to file rights — then
// no_new_privs and landlock_restrict_self. Returns 0 or a positive errno:
// EOPNOTSUPP without Landlock, EINVAL for a null path, the open's errno for
// a missing one. The ruleset fd is closed before it returns.
int confine_writes_in_child(const char* const* paths, std::size_t count) noexcept;

}  // namespace corral
