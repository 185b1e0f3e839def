// Test harness for namespaces_test and mount_tree_test: start a real child
// with clone3 and the namespace flags (fork-like: no CLONE_VM), apply the
// prepared namespaces in it, run a test function as "the program", and
// collect what it wrote, how pid 1 ended and any failure record.
// There is no process module yet, so this is the spawn path in miniature.
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "corral/namespaces.hpp"
#include "corral/syscalls.hpp"
#include "observe_support.hpp"
#include "support.hpp"

namespace harness {

using corral::NamespaceSpec;
using corral_test::in_child;
using corral_test::now_ms;
using corral_test::read_to_eof;

struct Sandbox {
  std::string error;           // prepare/clone/finish/apply failure, "" if none
  std::string out;             // what the program wrote to its out fd
  bool timed_out = false;      // out did not reach EOF in time
  corral_test::ChildEnd pid1;  // how the cloned child (pid 1) ended
  bool reported = false;       // pid 1 wrote its Pid1Report
  corral::Pid1Report report;
  std::map<std::string, std::string> kv() const;
};

// The program: gets the write end of the out pipe, returns its exit code.
using Program = std::function<int(int out)>;
// Runs in the test after the child is released: (host pid of pid 1, read end of out).
using ParentHook = std::function<void(pid_t, int)>;

// Start a child with the prepared namespaces and run `program` in it.
inline Sandbox run_prepared(corral::PreparedNamespaces& ns, const Program& program, const ParentHook& hook = {},
                            int timeout_ms = 10000) {
  Sandbox r;
  int err[2], out[2], rep[2];
  if (pipe2(err, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(rep, O_CLOEXEC)) {
    r.error = "pipe2 failed";
    return r;
  }
  clone_args args;
  std::memset(&args, 0, sizeof args);
  args.flags = ns.clone_flags();
  args.exit_signal = SIGCHLD;
  long pid = corral::sys::call(SYS_clone3, reinterpret_cast<long>(&args), sizeof args);
  if (pid == 0) {
    corral::NsFailure f;
    if (corral::apply_namespaces_in_child(ns, rep[1], &f) != 0) {
      corral::sys::write_all(err[1], &f, sizeof f);
      _exit(125);
    }
    _exit(program(out[1]));
  }
  close(err[1]);
  close(out[1]);
  close(rep[1]);
  if (pid < 0) {
    ns.abandon();
    r.error = std::string("clone3: ") + strerror(static_cast<int>(-pid));
  } else {
    if (auto st = ns.finish_in_parent(static_cast<pid_t>(pid)); !st) r.error = st.error().message();
    if (hook) hook(static_cast<pid_t>(pid), out[0]);
    r.timed_out = !read_to_eof(out[0], &r.out, timeout_ms);
    if (r.timed_out) kill(static_cast<pid_t>(pid), SIGKILL);
    int status = 0;
    if (waitpid(static_cast<pid_t>(pid), &status, 0) == pid) {
      r.pid1.exited = WIFEXITED(status);
      r.pid1.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      r.pid1.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    }
    // Non-blocking: without a pid namespace, a surviving descendant may
    // still hold these pipes; what the child wrote is there already.
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    fcntl(rep[0], F_SETFL, O_NONBLOCK);
    corral::NsFailure f;
    if (read(err[0], &f, sizeof f) == static_cast<ssize_t>(sizeof f)) r.error = ns.error_for(f).message();
    r.reported = read(rep[0], &r.report, sizeof r.report) == static_cast<ssize_t>(sizeof r.report) &&
                 r.report.magic == corral::kPid1ReportMagic;
  }
  close(err[0]);
  close(out[0]);
  close(rep[0]);
  return r;
}

inline Sandbox run(const NamespaceSpec& spec, const Program& program, const ParentHook& hook = {},
                   int timeout_ms = 10000) {
  auto ns = corral::prepare_namespaces(spec);
  if (!ns) {
    Sandbox r;
    r.error = ns.error().message();
    return r;
  }
  return run_prepared(*ns, program, hook, timeout_ms);
}

// ---- the program side: observations as "key=value" lines ---------------------

inline void say(int fd, const std::string& key, const std::string& value) {
  std::string line = key + "=" + value + "\n";
  corral::sys::write_all(fd, line.data(), line.size());
}

inline std::string errname(int err) { return err == 0 ? "ok" : strerrorname_np(err); }

// "ok" or the errno name of a call's -1/errno result.
inline std::string outcome(long ret) { return ret < 0 ? errname(errno) : "ok"; }

// Sorted names in a directory, comma-separated ("" + errno name if it fails).
inline std::string listing(const char* path) {
  DIR* d = opendir(path);
  if (!d) return "!" + errname(errno);
  std::vector<std::string> names;
  while (dirent* e = readdir(d))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names.push_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ",") + n;
  return s;
}

// Create (and write to) a file: "ok" or the errno name.
inline std::string try_create(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errname(errno);
  std::string r = write(fd, "x", 1) == 1 ? "ok" : errname(errno);
  close(fd);
  return r;
}

inline std::string tcp_connect(in_port_t port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return errname(errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string r = outcome(connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a));
  close(s);
  return r;
}


inline std::map<std::string, std::string> Sandbox::kv() const { return corral_test::kv(out); }

// ---- checks that return "" or what is wrong (usable in a forked child) -------

// "" when the sandbox ran and the program exited 0; else a description.
inline std::string ran_clean(const Sandbox& s) {
  if (!s.error.empty()) return "sandbox error: " + s.error;
  if (s.timed_out) return "the program's output never reached EOF";
  if (!s.pid1.exited || s.pid1.code != 0)
    return "pid 1 ended with code " + std::to_string(s.pid1.code) + " signal " + std::to_string(s.pid1.signal) +
           "; output:\n" + s.out;
  return "";
}

// Compare observed values with expected ones; "" or a list of mismatches.
inline std::string expect(const Sandbox& s, const std::map<std::string, std::string>& want) {
  if (auto e = ran_clean(s); !e.empty()) return e;
  return corral_test::observation_mismatches(s.out, want);
}

// Run body as root in this process, or rootless: as root, in a child that
// dropped to 65534; as anyone else, right here (we are rootless already).
inline std::string as_user(bool rootless, const std::function<std::string()>& body) {
  return rootless && geteuid() == 0 ? in_child(true, body) : body();
}

// The host ids a rootless sandbox maps: our own (call inside as_user's body).
inline uid_t own_uid() { return geteuid(); }
inline gid_t own_gid() { return getegid(); }

// "" when a rootless user namespace can be created here, else why not.
inline std::string rootless_userns_unavailable() {
  return as_user(true, [] {
    pid_t pid = fork();
    if (pid == 0) _exit(unshare(CLONE_NEWUSER) == 0 ? 0 : errno);
    int status = 0;
    waitpid(pid, &status, 0);
    int err = WIFEXITED(status) ? WEXITSTATUS(status) : EINTR;
    return err == 0 ? std::string() : std::string("unshare(CLONE_NEWUSER) as uid ") + std::to_string(geteuid()) +
                                          ": " + strerror(err);
  });
}

}  // namespace harness

// Rootless tests run as 65534 under root, or as the invoking user.
#define CORRAL_SKIP_UNLESS_ROOTLESS_USERNS()                                  \
  do {                                                                        \
    std::string harness_why_ = harness::rootless_userns_unavailable();        \
    if (!harness_why_.empty()) cr_skip_test("%s", harness_why_.c_str());      \
  } while (0)
