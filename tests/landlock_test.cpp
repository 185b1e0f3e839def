#include "corral/landlock.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <cstring>

// support.hpp (sys/wait.h) first: syscalls.hpp #defines P_PIDFD, which
// glibc 2.36 declares as an idtype_t enumerator.
#include "support.hpp"
#include "corral/syscalls.hpp"

using namespace corral;
using corral_test::run_in_child;
using corral_test::TempDir;

namespace {

constexpr int kApplyFailed = 250;
constexpr int kNoChild = 251;

void require_abi(int needed) {
  if (landlock_abi() < needed)
    cr_skip_test("needs Landlock ABI %d (this kernel offers %d)", needed, landlock_abi());
}

LandlockRuleset must_prepare(const LandlockSpec& spec, int max_abi = 1000) {
  auto rs = prepare_for_abi(spec, max_abi);
  cr_assert(rs.ok(), "prepare: %s", rs.error().message().c_str());
  return std::move(rs).value();
}

// In a forked child: enter the ruleset, run op, exit with 0 when op
// succeeded or with the errno it failed with (kApplyFailed when the
// ruleset could not be entered).
int errno_under(const LandlockRuleset& rs, const std::function<int()>& op) {
  auto end = run_in_child([&] {
    if (apply_landlock_in_child(rs) != 0) return kApplyFailed;
    return op() < 0 ? errno : 0;
  });
  return end.exited ? end.code : kNoChild;
}

int create_file(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  return fd < 0 ? -1 : close(fd);
}

int read_file(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[64];
  ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  return n < 0 ? -1 : 0;
}

void expect_errno(int got, int want, const char* what) {
  cr_assert_eq(got, want, "%s: got %d (%s), want %d (%s)", what, got, strerror(got), want,
               strerror(want));
}

void expect_mentions(const std::string& text, std::initializer_list<const char*> words) {
  for (const char* w : words)
    cr_assert(text.find(w) != std::string::npos, "'%s' not in: %s", w, text.c_str());
}

void expect_error_mentions(const Expected<LandlockRuleset>& rs,
                           std::initializer_list<const char*> words) {
  cr_assert(!rs.ok(), "prepare accepted a spec it should refuse");
  expect_mentions(rs.error().message(), words);
}

// A TCP listener on 127.0.0.1 with a kernel-chosen port.
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (sockaddr*)&a, sizeof a) != 0 || listen(fd, 8) != 0 ||
        getsockname(fd, (sockaddr*)&a, &len) != 0)
      cr_skip_test("cannot listen on 127.0.0.1: %s", strerror(errno));
    port = ntohs(a.sin_port);
  }
  ~Listener() { close(fd); }
};

int tcp_connect(int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int r = connect(s, (sockaddr*)&a, sizeof a);
  int saved = errno;
  close(s);
  errno = saved;
  return r;
}

}  // namespace

Test(landlock, abi_is_probed_and_cached) {
  long raw = syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  int want = raw > 0 ? static_cast<int>(raw) : 0;
  cr_assert_eq(landlock_abi(), want);
  cr_assert_eq(landlock_abi(), want);
}

Test(landlock, claim_follows_the_abi) {
  cr_assert_eq(landlock_claim_for_abi(0), ContentClaim::unsupported);
  cr_assert_eq(landlock_claim_for_abi(2), ContentClaim::hard_content_except_truncate);
  cr_assert_eq(landlock_claim_for_abi(7), ContentClaim::hard_content);
  cr_assert(to_string(ContentClaim::hard_content_except_truncate) == "hard_content_except_truncate");
  cr_assert(to_string(ContentClaim::unsupported) == "unsupported");
  require_abi(3);
  cr_assert_eq(landlock_claim(), ContentClaim::hard_content);
  TempDir dir;
  auto rs = must_prepare(LandlockSpec().allow_writes(dir.path()));
  cr_assert_eq(rs.claim(), ContentClaim::hard_content);
  cr_assert_eq(rs.abi(), landlock_abi());
  expect_mentions(rs.describe(), {"(hard_content)"});
}

Test(landlock, writes_only_inside_the_write_set) {
  require_abi(1);
  TempDir in, out;
  auto rs = must_prepare(LandlockSpec().allow_writes(in.path()));
  expect_errno(errno_under(rs, [&] { return create_file(in / "ok"); }), 0, "create inside");
  expect_errno(errno_under(rs, [&] { return create_file(out / "no"); }), EACCES, "create outside");
  expect_errno(errno_under(rs, [&] { return mkdir((out / "d").c_str(), 0700); }), EACCES,
               "mkdir outside");
  struct stat st;
  cr_assert(stat((in / "ok").c_str(), &st) == 0, "the file inside was not created");
  cr_assert(stat((out / "no").c_str(), &st) != 0, "the file outside exists");
}

Test(landlock, reading_and_executing_still_work) {
  require_abi(1);
  TempDir in;
  auto rs = must_prepare(LandlockSpec().allow_writes(in.path()));
  expect_errno(errno_under(rs, [] { return read_file("/etc/hostname"); }), 0, "read /etc/hostname");
  auto end = run_in_child([&] {
    if (apply_landlock_in_child(rs) != 0) return kApplyFailed;
    execl("/bin/true", "true", (char*)nullptr);
    return 127;
  });
  cr_assert(end.exited && end.code == 0, "/bin/true under the ruleset: exit %d signal %d", end.code,
            end.signal);
}

Test(landlock, a_single_file_can_be_the_write_set) {
  require_abi(1);
  TempDir dir;
  corral_test::write_file(dir / "log", "x");
  auto rs = must_prepare(LandlockSpec().allow_writes(dir / "log"));
  expect_errno(errno_under(rs, [&] {
                 int fd = open((dir / "log").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
                 return fd < 0 ? -1 : close(fd);
               }),
               0, "append to the allowed file");
  expect_errno(errno_under(rs, [&] { return create_file(dir / "sibling"); }), EACCES,
               "create a sibling");
}

Test(landlock, truncate_outside_is_denied_from_abi_3) {
  require_abi(3);
  TempDir in, out;
  corral_test::write_file(out / "keep", "precious");
  corral_test::write_file(in / "mine", "scratch");
  auto rs = must_prepare(LandlockSpec().allow_writes(in.path()));
  expect_errno(errno_under(rs, [&] { return truncate((out / "keep").c_str(), 0); }), EACCES,
               "truncate(2) outside");
  expect_errno(errno_under(rs, [&] { return open((out / "keep").c_str(), O_RDONLY | O_TRUNC); }),
               EACCES, "O_TRUNC outside");
  expect_errno(errno_under(rs, [&] { return truncate((in / "mine").c_str(), 0); }), 0,
               "truncate inside");
  std::string kept = corral_test::read_file(out / "keep");
  cr_assert_str_eq(kept.c_str(), "precious");
}

Test(landlock, abi_2_ruleset_leaves_truncate_open_as_claimed) {
  require_abi(2);
  TempDir in, out;
  corral_test::write_file(out / "victim", "data");
  auto rs = must_prepare(LandlockSpec().allow_writes(in.path()), 2);
  cr_assert_eq(rs.claim(), ContentClaim::hard_content_except_truncate);
  cr_assert_eq(rs.enforced().handled_fs & LANDLOCK_ACCESS_FS_TRUNCATE, 0u);
  cr_assert_neq(rs.enforced().handled_fs & LANDLOCK_ACCESS_FS_REFER, 0u);
  expect_errno(errno_under(rs, [&] { return truncate((out / "victim").c_str(), 0); }), 0,
               "truncate outside under ABI 2");
  expect_errno(errno_under(rs, [&] { return create_file(out / "new"); }), EACCES,
               "create outside under ABI 2");
}

Test(landlock, handled_rights_drop_what_the_abi_lacks) {
  require_abi(5);
  TempDir dir;
  auto v1 = must_prepare(LandlockSpec().allow_writes(dir.path()), 1);
  cr_assert_eq(v1.enforced().handled_fs & LANDLOCK_ACCESS_FS_REFER, 0u);
  auto v4 = must_prepare(LandlockSpec().allow_writes(dir.path()), 4);
  cr_assert_neq(v4.enforced().handled_fs & LANDLOCK_ACCESS_FS_TRUNCATE, 0u);
  cr_assert_eq(v4.enforced().handled_fs & LANDLOCK_ACCESS_FS_IOCTL_DEV, 0u);
  auto v5 = must_prepare(LandlockSpec().allow_writes(dir.path()), 5);
  cr_assert_neq(v5.enforced().handled_fs & LANDLOCK_ACCESS_FS_IOCTL_DEV, 0u);
}

Test(landlock, tcp_connect_refused_without_allow_list) {
  require_abi(4);
  Listener l;
  auto rs = must_prepare(LandlockSpec().confine_writes(false).restrict_tcp(true));
  expect_errno(errno_under(rs, [&] { return tcp_connect(l.port); }), EACCES, "connect");
  cr_assert_eq(tcp_connect(l.port), 0, "the listener itself does not answer");
}

Test(landlock, tcp_connect_allowed_to_listed_port) {
  require_abi(4);
  Listener l;
  auto rs = must_prepare(LandlockSpec().confine_writes(false).tcp_connect_allow(l.port));
  expect_errno(errno_under(rs, [&] { return tcp_connect(l.port); }), 0, "connect to listed port");
  expect_mentions(rs.describe(), {("tcp connect: " + std::to_string(l.port)).c_str()});
}

Test(landlock, tcp_bind_refused_unless_listed) {
  require_abi(4);
  int port;
  {
    Listener probe;  // borrow a free port number, then release it
    port = probe.port;
  }
  auto bind_port = [&] {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return bind(s, (sockaddr*)&a, sizeof a);
  };
  auto closed = must_prepare(LandlockSpec().confine_writes(false).restrict_tcp(true));
  expect_errno(errno_under(closed, bind_port), EACCES, "bind unlisted port");
  auto open = must_prepare(LandlockSpec().confine_writes(false).tcp_bind_allow(port));
  expect_errno(errno_under(open, bind_port), 0, "bind listed port");
}

Test(landlock, signal_scoping_stops_kill_outside_the_domain) {
  require_abi(6);
  pid_t outside = getpid();  // the test process: not in the child's domain
  auto scoped = must_prepare(LandlockSpec().confine_writes(false).scope_signals(true));
  expect_errno(errno_under(scoped, [&] { return kill(outside, 0); }), EPERM, "kill outside, scoped");
  // Control: the same child without the scope may signal it.
  TempDir dir;
  auto plain = must_prepare(LandlockSpec().allow_writes(dir.path()));
  expect_errno(errno_under(plain, [&] { return kill(outside, 0); }), 0, "kill outside, unscoped");
  expect_mentions(scoped.describe(), {"scoped: signals"});
}

// A domain of its own at ABI 1, with nothing else restricted: from inside
// it, the memory of a process outside (here the test process, which the
// child could otherwise read as root) is refused; without it, it is not.
Test(landlock, an_own_domain_keeps_out_of_a_process_outside_at_abi_1) {
  require_abi(1);
  const std::string mem = "/proc/" + std::to_string(getpid()) + "/mem";
  auto own = must_prepare(LandlockSpec().confine_writes(false).own_domain(true), 1);
  cr_expect_eq(own.enforced().handled_fs, static_cast<std::uint64_t>(LANDLOCK_ACCESS_FS_MAKE_BLOCK));
  expect_mentions(own.describe(), {"a domain of its own"});
  auto open_mem = [&] {
    int fd = open(mem.c_str(), O_RDONLY | O_CLOEXEC);
    return fd < 0 ? -1 : close(fd);
  };
  expect_errno(errno_under(own, open_mem), EACCES, "open /proc/PARENT/mem from its own domain");
  auto none = run_in_child([&] { return open_mem() < 0 ? errno : 0; });
  cr_expect(none.exited && none.code == 0, "control: outside any domain, the child could not open %s (%d)",
            mem.c_str(), none.code);
}

Test(landlock, abstract_unix_scoping_stops_connect_outside) {
  require_abi(6);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string name = "corral-landlock-test-" + std::to_string(getpid());
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  int srv = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert(srv >= 0 && bind(srv, (sockaddr*)&addr, len) == 0 && listen(srv, 4) == 0);
  auto connect_it = [&] {
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    return connect(s, (sockaddr*)&addr, len);
  };
  auto scoped = must_prepare(LandlockSpec().confine_writes(false).scope_abstract_unix(true));
  expect_errno(errno_under(scoped, connect_it), EPERM, "connect abstract, scoped");
  auto plain = must_prepare(LandlockSpec().confine_writes(false).restrict_tcp(true));
  expect_errno(errno_under(plain, connect_it), 0, "connect abstract, unscoped");
  close(srv);
}

Test(landlock, apply_sets_no_new_privs) {
  require_abi(1);
  TempDir dir;
  auto rs = must_prepare(LandlockSpec().allow_writes(dir.path()));
  auto end = run_in_child([&] {
    if (apply_landlock_in_child(rs) != 0) return kApplyFailed;
    return corral_test::proc_status_field("self", "NoNewPrivs") == "1" ? 0 : 1;
  });
  cr_assert(end.exited && end.code == 0, "NoNewPrivs not 1 (exit %d)", end.code);
}

Test(landlock, ruleset_fd_is_cloexec) {
  require_abi(1);
  TempDir dir;
  auto rs = must_prepare(LandlockSpec().allow_writes(dir.path()));
  int flags = fcntl(rs.fd(), F_GETFD);
  cr_assert(flags >= 0 && (flags & FD_CLOEXEC), "ruleset fd %d lacks FD_CLOEXEC", rs.fd());
}

Test(landlock, nonexistent_write_path_is_named) {
  require_abi(1);
  TempDir dir;
  std::string missing = dir / "no-such-dir";
  expect_error_mentions(prepare(LandlockSpec().allow_writes(missing)),
                        {missing.c_str(), "write path", "No such file or directory"});
}

Test(landlock, features_the_abi_lacks_are_errors_naming_the_abi) {
  expect_error_mentions(prepare_for_abi(LandlockSpec().confine_writes(false).restrict_tcp(true), 3),
                        {"TCP", "ABI 4", "ABI 3"});
  expect_error_mentions(prepare_for_abi(LandlockSpec().confine_writes(false).scope_signals(true), 5),
                        {"signal", "ABI 6", "ABI 5"});
  expect_error_mentions(
      prepare_for_abi(LandlockSpec().confine_writes(false).scope_abstract_unix(true), 4),
      {"abstract unix", "ABI 6", "ABI 4"});
  expect_error_mentions(prepare_for_abi(LandlockSpec().allow_writes("/tmp"), 0),
                        {"write confinement", "ABI 0"});
  auto err = prepare_for_abi(LandlockSpec(), 0);
  cr_assert(!err.ok());
  cr_assert_eq(err.error().code(), EOPNOTSUPP);
}

Test(landlock, contradictory_or_bad_specs_are_refused) {
  expect_error_mentions(prepare(LandlockSpec().allow_writes("/tmp").confine_writes(false)),
                        {"/tmp", "confine_writes"});
  expect_error_mentions(prepare(LandlockSpec().tcp_connect_allow(80).restrict_tcp(false)),
                        {"allow-list", "restrict_tcp"});
  expect_error_mentions(prepare(LandlockSpec().tcp_bind_allow(70000)), {"70000", "range"});
  expect_error_mentions(prepare(LandlockSpec().tcp_connect_allow(-1)), {"-1", "range"});
  expect_error_mentions(prepare(LandlockSpec().allow_writes("")), {"empty write path"});
  expect_error_mentions(prepare(LandlockSpec().confine_writes(false)), {"nothing to enforce"});
}

Test(landlock, apply_without_a_ruleset_fails_cleanly) {
  LandlockRuleset empty;
  cr_assert_eq(apply_landlock_in_child(empty), EBADF);
}
