// Support for the container tier's integration tests (container_test,
// container_setup_test): a Supervisor per test with a private workspace base,
// container requests with tests/helpers bound at /helpers, observations as
// key=value lines, host-side checks (run cgroups, mounts, processes), the
// CLI, and running a body as uid 65534 for the rootless cases.
#pragma once

#include <arpa/inet.h>
#include <dirent.h>
#include <grp.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <functional>
#include <map>

#include "corral/cgroup.hpp"
#include "corral/container.hpp"
#include "corral/enforcement.hpp"
#include "corral/json.hpp"
#include "corral/ns_template.hpp"
#include "corral/supervisor.hpp"
#include "corral/syscalls.hpp"
#include "observe_support.hpp"
#include "support.hpp"
#include "supervisor_harness.hpp"

namespace container_test {

using namespace corral;
using corral_test::contains;
using corral_test::Harness;
using corral_test::kv;
using corral_test::TempDir;

// A template root of the test's own below `dir`, so it never touches the
// host's templates; a test's .fini drops every root handed out.
inline std::vector<std::string> g_template_roots;
inline std::string private_root(const TempDir& dir) {
  g_template_roots.push_back(dir.path() + "/templates");
  return g_template_roots.back();
}
inline void drop_private_roots() {
  for (const auto& r : g_template_roots) {
    (void)remove_ns_templates(r);
    // The TempDir's own removal ran first and stopped at the mounts: its
    // directory goes now that they are gone (remove_all stops at a mount
    // that is still there, never crossing it).
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::path(r).parent_path(), ec);
  }
}

// The host facts, probed once per test process.
inline const HostFacts& host() {
  static HostFacts h = probe_host();
  return h;
}

#define SKIP_UNLESS_CONTAINER()                                                               \
  do {                                                                                        \
    if (!host().user_namespaces || !host().pivot_root)                                        \
      cr_skip_test("no container tier on this host: %s", host().container_probe.c_str());     \
  } while (0)

#define SKIP_UNLESS_CGROUP(ctl)                                                                \
  do {                                                                                         \
    if (!host().cgroup_##ctl) cr_skip_test("no per-run " #ctl " cgroup: %s", host().cgroup_summary.c_str()); \
  } while (0)

inline std::string helpers_dir() {
  char buf[PATH_MAX];
  return realpath(corral_test::helper("").c_str(), buf) ? std::string(buf) : corral_test::helper("");
}

#ifdef CONTAINER_TEST_STAGED
// container_template_test: the helper in argv[0] ("/helpers/NAME") staged
// into the workspace instead of bound, so a root run (no binds) enters the
// namespace template (ns_template.hpp) and every test below holds there too.
inline constexpr bool kStaged = true;
inline Request boxed(std::vector<std::string> argv) {
  Request r;
  r.tier = Tier::container;
  const std::string prefix = "/helpers/";
  if (!argv.empty() && argv[0].rfind(prefix, 0) == 0) {
    Input in;
    in.name = argv[0].substr(prefix.size());
    in.host_path = helpers_dir() + "/" + in.name;
    in.mode = 0755;
    r.inputs.push_back(std::move(in));
    argv[0] = "/workspace/" + argv[0].substr(prefix.size());
  }
  r.argv = std::move(argv);
  return r;
}
#else
// A container-tier request with the test helpers at /helpers (a bind: the
// run builds its namespaces per run).
inline constexpr bool kStaged = false;
inline Request boxed(std::vector<std::string> argv) {
  Request r;
  r.tier = Tier::container;
  r.argv = std::move(argv);
  r.binds.push_back(MountBind{helpers_dir(), "/helpers", false});
  return r;
}
#endif

// Whether runs from this process enter the namespace template.
inline bool in_template() { return kStaged && geteuid() == 0 && host().landlock_abi >= 6; }

// `argv` submitted to h's supervisor without waiting; its Result lands in
// *result once the loop has run it to the end.
inline RunHandle submit_boxed(Harness& h, std::vector<std::string> argv, std::shared_ptr<Result>* result) {
  RunCallbacks cb;
  cb.on_result = [result](const Result& r) { *result = std::make_shared<Result>(r); };
  auto handle = h.sup->submit(boxed(std::move(argv)), cb);
  cr_assert(handle.ok(), "%s", handle.ok() ? "" : handle.error().message().c_str());
  return std::move(*handle);
}

// "" or the list of observations that differ from `want`.
inline std::string mismatches(const Result& r, const std::map<std::string, std::string>& want) {
  if (r.outcome != Outcome::exited || r.exit_code != 0)
    return "the run ended " + std::string(to_string(r.outcome)) + ": " + r.detail + "\nstdout: " +
           r.stdout_capture.text + "\nstderr: " + r.stderr_capture.text;
  std::string bad = corral_test::observation_mismatches(r.stdout_capture.text, want);
  return bad.empty() ? "" : bad + "\nstdout:\n" + r.stdout_capture.text;
}

// Everything the sandbox shows one program, observed once.
inline Result observe(Harness& h) {
  in_port_t port = 0;
  int listener = corral_test::tcp_listen(&port);
  cr_assert(listener >= 0, "host listener: %s", strerror(errno));
  Result r = h.run(boxed({"/helpers/inside", "observe", std::to_string(port)}));
  close(listener);
  return r;
}

// Run groups the process `pid` made (default: this test process), in every
// hierarchy the probe uses.
inline std::size_t my_run_cgroups(pid_t pid = getpid()) {
  const CgroupProbe& p = host().cgroups;
  std::vector<std::string> parents;
  if (p.backend == CgroupVersion::v2) parents.push_back(p.v2_own_dir + "/corral");
  for (const auto& h : p.v1)
    if (!h.own_dir.empty()) parents.push_back(h.own_dir + "/corral");
  std::string mine = "-" + std::to_string(pid) + "-";
  std::size_t n = 0;
  for (const auto& dir : parents) {
    DIR* d = opendir(dir.c_str());
    while (dirent* e = d ? readdir(d) : nullptr) n += contains(e->d_name, mine);
    if (d) closedir(d);
  }
  return n;
}

// Host mounts, but for the namespace templates' nsfs binds under
// /run/corral/templates: those are kept on purpose (at most two per
// template, kKeptTemplates templates) and come and go with other tests'
// identities; ns_template_test counts them itself.
inline std::size_t mount_count() {
  std::string text = corral_test::read_file("/proc/self/mountinfo");
  std::size_t n = 0, start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    n += text.compare(start, end - start, "") != 0 &&
         text.substr(start, end - start).find(" /run/corral/templates/") == std::string::npos;
    start = end + 1;
  }
  return n;
}

// Host processes whose command line contains `marker`.
inline std::size_t host_processes_with(const std::string& marker) {
  std::size_t n = 0;
  DIR* d = opendir("/proc");
  while (dirent* e = d ? readdir(d) : nullptr) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::string cmd = corral_test::read_file("/proc/" + std::string(e->d_name) + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    n += contains(cmd, marker);
  }
  if (d) closedir(d);
  return n;
}

// `corral ARGS...` started with its stdout on `out_fd` (stderr discarded;
// -1: stdout discarded too); its pid.
inline pid_t start_cli(const std::vector<std::string>& args, int out_fd = -1) {
  std::string bin = corral_test::build_dir() + "/bin/corral";
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(out_fd >= 0 ? out_fd : null, 1);
    dup2(null, 2);
    std::vector<char*> argv{bin.data()};
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

// The CLI's exit code for `corral ARGS...` (output discarded).
inline int cli(const std::vector<std::string>& args) {
  pid_t pid = start_cli(args);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Run body as uid/gid 65534 in a forked child (dumpable again, as a process
// that never changed ids is, so it may write its own child's id maps).
// Returns what body returned: "" means fine.
inline std::string as_nobody(const std::function<std::string()>& body) { return corral_test::in_child(true, body); }

}  // namespace container_test
