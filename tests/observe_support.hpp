// Shared by the sandbox harness (namespaces, mount_tree tests) and the
// container tests: programs that report key=value observations, checks that
// compare them, and a forked child that may drop to uid/gid 65534.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <string>

#include "corral/syscalls.hpp"

namespace corral_test {

// "key=value" lines as a map; other lines are ignored.
inline std::map<std::string, std::string> kv(const std::string& text) {
  std::map<std::string, std::string> m;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t nl = text.find('\n', i);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(i, nl - i);
    if (auto eq = line.find('='); eq != std::string::npos) m[line.substr(0, eq)] = line.substr(eq + 1);
    i = nl + 1;
  }
  return m;
}

// "" or "unexpected observations:" and each key of `want` that `text` reports otherwise.
inline std::string observation_mismatches(const std::string& text, const std::map<std::string, std::string>& want) {
  auto got = kv(text);
  std::string bad;
  for (const auto& [k, v] : want) {
    auto it = got.find(k);
    std::string g = it == got.end() ? "<missing>" : it->second;
    if (g != v) bad += "\n  " + k + ": expected '" + v + "', got '" + g + "'";
  }
  return bad.empty() ? "" : "unexpected observations:" + bad;
}

// What tests/helpers/inside's `families` must print under a network
// policy that allows AF_UNIX, plus IP when `inet`, plus netlink when
// `netlink`: every other family, and socketpair(2) of anything but AF_UNIX,
// refused by the seccomp filter (EACCES), never the kernel's own answer
// (EAFNOSUPPORT for a family it lacks, EPERM for packet without
// CAP_NET_RAW, EOPNOTSUPP for socketpair of AF_INET), so a refusal seen here
// is the filter's whatever this kernel has built in.
inline std::map<std::string, std::string> socket_families_allowing(bool inet, bool netlink) {
  std::map<std::string, std::string> want;
  for (const char* k : {"inet", "inet6", "netlink", "packet", "vsock", "alg", "bluetooth", "key", "xdp",
                        "socketpair_inet", "socketpair_tipc"})
    want[k] = "EACCES";
  want["unix"] = want["socketpair_unix"] = "ok";
  if (inet) want["inet"] = want["inet6"] = "ok";
  if (netlink) want["netlink"] = "ok";
  return want;
}

inline double now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Read fd until EOF or until `timeout_ms` passes.
inline bool read_to_eof(int fd, std::string* out, int timeout_ms) {
  double deadline = now_ms() + timeout_ms;
  char buf[4096];
  for (;;) {
    int left = static_cast<int>(deadline - now_ms());
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, left) <= 0) continue;
    ssize_t n = read(fd, buf, sizeof buf);
    if (n == 0) return true;
    if (n < 0 && errno != EINTR) return true;
    if (n > 0) out->append(buf, static_cast<std::size_t>(n));
  }
}

// Run body in a forked child (so it may unshare, mount, or change ids
// without touching the test process), first dropping to uid/gid 65534 when
// `drop` (and making itself dumpable again, as a process that never changed
// ids is, so it may write its own child's /proc maps). Returns what body
// returned ("" means fine).
inline std::string in_child(bool drop, const std::function<std::string()>& body) {
  int p[2];
  if (pipe2(p, O_CLOEXEC)) return "pipe2 failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    std::string r;
    if (drop && (setgroups(0, nullptr) || setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534) ||
                 prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)))
      r = std::string("dropping to 65534: ") + strerror(errno);
    else
      r = body();
    corral::sys::write_all(p[1], r.data(), r.size());
    _exit(0);
  }
  close(p[1]);
  std::string r;
  read_to_eof(p[0], &r, 60000);
  close(p[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status)) return "the test child died (signal " + std::to_string(WTERMSIG(status)) + ")";
  return r;
}

// A listening socket on 127.0.0.1 (port 0: any); returns the fd, *port set.
inline int tcp_listen(in_port_t* port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) || listen(s, 4) ||
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len)) {
    if (s >= 0) close(s);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return s;
}

}  // namespace corral_test

#define EXPECT_EMPTY(expr)                                            \
  do {                                                                \
    std::string expect_empty_msg_ = (expr);                           \
    cr_assert(expect_empty_msg_.empty(), "%s", expect_empty_msg_.c_str()); \
  } while (0)
