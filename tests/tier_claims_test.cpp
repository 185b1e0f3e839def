// The declarations of corral's tiers (src/isolation.cpp) checked against
// real runs through the Supervisor. Each test reads what the tier declares
// and shows the behaviour that makes the claim true — for a "no" too: a
// tier that says it does not reap descendants really lets a setsid()
// escapee live, so nobody relies on more than it gives.
//
// The helpers are staged into the workspace as inputs and run from there,
// so the same tests run in a container's mount tree. The container tier's
// tests skip ("container tier not in this build") while a trivial container
// run is refused with ENOTSUP, and run as soon as the tier works.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "corral/isolation.hpp"
#include "corral/route_run.hpp"
#include "corral/routes_file.hpp"
#include "corral/supervisor.hpp"
#include "support.hpp"
#include "supervisor_harness.hpp"

using namespace corral;
using corral_test::contains;
using corral_test::expect_text;

namespace {

// One tier under test: its declaration, a supervisor, and staged helpers.
struct Subject {
  std::string name;
  Tier tier = Tier::none;
  TierCapabilities declared;
  corral_test::TempDir base;
  std::unique_ptr<Supervisor> sup;

  explicit Subject(std::string_view tier_name) : name(tier_name) {
    bool found = false;
    for (const auto& d : corral_tiers())
      if (d.name == tier_name) declared = d.capabilities, found = true;
    cr_assert(found, "no tier %s in corral_tiers()", name.c_str());
    auto parsed = parse_tier(name);
    cr_assert(parsed.ok());
    tier = *parsed;
    sup = corral_test::supervisor_over(base);
    if (tier == Tier::container) {
      auto probe = sup->run(request({"true"}));
      if (!probe.ok() && probe.error().code() == ENOTSUP)
        cr_skip_test("container tier not in this build (%s)", probe.error().message().c_str());
    }
  }

  // A request as a route would shape it: no network where the tier can
  // close it.
  Request request(std::vector<std::string> argv) const {
    Request r;
    r.tier = tier;
    r.argv = std::move(argv);
    if (tier == Tier::container) r.net = NetworkAccess::none;
    // Sanitizer builds (make asan) instrument the helpers too; they need
    // the test's options (leak checking off) in their clean environment.
    for (const char* name : {"ASAN_OPTIONS", "UBSAN_OPTIONS"})
      if (const char* value = std::getenv(name)) r.env[name] = value;
    return r;
  }
  // `helper` (from build/helpers) staged into the workspace and run from it.
  Request staged(const std::string& helper, std::vector<std::string> args) const {
    std::vector<std::string> argv{"./" + helper};
    argv.insert(argv.end(), args.begin(), args.end());
    Request r = request(std::move(argv));
    r.inputs.push_back(Input{helper, std::nullopt, corral_test::helper(helper), 0755});
    return r;
  }
  Result run(Request r) {
    auto res = sup->run(std::move(r));
    cr_assert(res.ok(), "tier %s refused the run: %s", name.c_str(), res.ok() ? "" : res.error().message().c_str());
    return std::move(*res);
  }
};

std::string describe(const Result& r) {
  return std::string(to_string(r.outcome)) + " (" + r.detail + "); stdout: " + r.stdout_capture.text +
         "; stderr: " + r.stderr_capture.text;
}

// Host pids whose command line contains `token` (zombies have none).
std::vector<pid_t> pids_with(const std::string& token) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  while (dirent* e = d ? readdir(d) : nullptr) {
    pid_t pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == getpid()) continue;
    std::string cmdline = corral_test::read_file("/proc/" + std::string(e->d_name) + "/cmdline");
    for (auto& c : cmdline)
      if (c == '\0') c = ' ';
    if (contains(cmdline, token)) out.push_back(pid);
  }
  if (d) closedir(d);
  return out;
}

// A TCP listener on 127.0.0.1 (an ephemeral port), closed with the object.
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    cr_assert_eq(listen(fd, 8), 0);
    port = ntohs(a.sin_port);
  }
  ~Listener() { close(fd); }
  std::string port_text() const { return std::to_string(port); }
};

// ---- the claims, one function each, for any tier.

// exec + streaming: the program runs, and its first line arrives while it
// is still running (well before the result).
void check_exec_and_streaming(std::string_view tier) {
  Subject s(tier);
  cr_assert(s.declared.exec, "every corral tier runs argv");
  auto stream = s.sup->stream(s.staged("claims", {"tick"}));
  cr_assert(stream.ok(), "%s", stream.ok() ? "" : stream.error().message().c_str());
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> first_chunk;
  std::shared_ptr<Result> result;
  std::string seen;
  while (true) {
    auto ev = stream->next();
    cr_assert(ev.ok());
    if (!ev->has_value()) break;
    if ((*ev)->kind == RunEvent::output) {
      if (!first_chunk) first_chunk = Clock::now();
      seen += (*ev)->data;
    } else {
      result = (*ev)->final;
      break;
    }
  }
  cr_assert(result);
  cr_assert_eq(result->outcome, Outcome::exited, "%s", describe(*result).c_str());
  cr_assert_str_eq(seen.c_str(), "first\nsecond\n");
  cr_assert(first_chunk.has_value());
  double early = std::chrono::duration<double>(Clock::now() - *first_chunk).count();
  if (s.declared.streaming)
    cr_assert_gt(early, 0.25, "streaming declared, but the first line came only %.3f s before the end", early);
  else
    cr_assert_lt(early, 0.1, "streaming not declared, yet output arrived %.3f s early", early);
}

void check_files_in(std::string_view tier) {
  Subject s(tier);
  Request r = s.request({"cat", "data.txt"});
  r.inputs.push_back(Input{"data.txt", std::string("staged payload\n"), std::nullopt, 0644});
  Result res = s.run(std::move(r));
  if (s.declared.files_in)
    cr_assert_str_eq(res.stdout_capture.text.c_str(), "staged payload\n", "%s", describe(res).c_str());
  else
    cr_assert(!contains(res.stdout_capture.text, "staged payload"));
}

// files_out (a literal declared output) and files_list (a glob).
void check_files_out_and_list(std::string_view tier) {
  Subject s(tier);
  DeclaredOutput literal{"one.txt", "text/plain", true, "lit/one.txt", Disposition::consume};
  DeclaredOutput glob{"*.txt", "text/plain", false, "all", Disposition::consume};
  Request r = s.request({"sh", "-c", "echo a > one.txt; echo b > two.txt"});
  std::vector<DeclaredOutput> outputs{literal};
  if (s.declared.files_list) outputs.push_back(glob);
  r.declared_outputs = outputs;
  r.output_caps = TransferLimits{};
  Result res = s.run(std::move(r));
  std::string names;
  for (const auto& a : res.artifacts) names += a.name + " ";
  std::string notes;
  for (const auto& n : res.artifact_notes) notes += n + " ";
  cr_assert(s.declared.files_out, "every corral tier collects declared outputs");
  cr_assert(contains(names, "lit/one.txt"), "artifacts: %s; notes: %s", names.c_str(), notes.c_str());
  if (s.declared.files_list)
    cr_assert(contains(names, "all/one.txt all/two.txt"), "artifacts: %s; notes: %s", names.c_str(), notes.c_str());
}

// A cpu_seconds spinner and a file_bytes writer end killed_resource, naming
// the limit.
void check_reports_resource_kill(std::string_view tier) {
  Subject s(tier);
  Request spin = s.staged("hostile", {"spin"});
  spin.limits.set(Limit::cpu_seconds, 1);
  Result cpu = s.run(std::move(spin));
  Request big = s.staged("hostile", {"write-file", "big", "50000"});
  big.limits.set(Limit::file_bytes, 1000);
  Result file = s.run(std::move(big));
  if (!s.declared.reports_resource_kill) {
    cr_assert_neq(cpu.outcome, Outcome::killed_resource, "the tier reports more than it declares");
    return;
  }
  cr_assert_eq(cpu.outcome, Outcome::killed_resource, "%s", describe(cpu).c_str());
  cr_assert_str_eq(cpu.resource.c_str(), "cpu_seconds");
  cr_assert_eq(file.outcome, Outcome::killed_resource, "%s", describe(file).c_str());
  cr_assert_str_eq(file.resource.c_str(), "file_bytes");
}

// Three children touching 48 MiB each under memory_bytes = 64 MiB: a tier
// that bounds the tree stops them (killed_oom when it reports resource
// kills); one that bounds each process (RLIMIT_AS) lets the tree hold 144.
void check_enforces_memory(std::string_view tier) {
  Subject s(tier);
  if (contains(corral_test::read_file(corral_test::helper("claims")), "__asan_init"))
    cr_skip_test("the helper is built with AddressSanitizer, whose shadow memory does not fit under memory_bytes");
  Request r = s.staged("claims", {"tree-alloc", "3", "48"});
  r.limits.set(Limit::memory_bytes, 64u << 20);
  r.limits.set(Limit::wall_seconds, 60);  // a hang fails here, not at the binary timeout
  auto ran = s.sup->run(std::move(r));
  if (!ran.ok() && s.declared.enforces_memory)
    cr_skip_test("memory_bytes is not enforceable in tier %s on this host: %s", s.name.c_str(),
                 ran.error().message().c_str());
  cr_assert(ran.ok(), "%s", ran.ok() ? "" : ran.error().message().c_str());
  const Result& res = *ran;
  if (s.declared.enforces_memory) {
    cr_assert(!contains(res.stdout_capture.text, "held 3"), "the tree exceeded memory_bytes: %s", describe(res).c_str());
    if (s.declared.reports_resource_kill) cr_assert_eq(res.outcome, Outcome::killed_oom, "%s", describe(res).c_str());
  } else {
    cr_assert_eq(res.outcome, Outcome::exited, "%s", describe(res).c_str());
    cr_assert_str_eq(res.stdout_capture.text.c_str(), "held 3 x 48 MiB\n",
                     "the tree did not exceed memory_bytes: declare enforces_memory? %s", describe(res).c_str());
  }
}

// A double fork + setsid() escapee: gone after the run where the tier reaps
// descendants, alive (and killed here) where it says it does not.
void check_reaps_descendants(std::string_view tier) {
  Subject s(tier);
  // What the gate believes on this host: tier process as root has a uid of
  // its own whose every process is killed (routes_file.hpp).
  auto on_host = host_tier_capabilities(s.name, probe_host());
  cr_assert(on_host.ok());
  s.declared.reaps_descendants = on_host->reaps_descendants;
  std::string token = "corral-claim-" + std::to_string(getpid()) + "-" + s.name;
  Result res = s.run(s.staged("hostile", {"setsid-escape", token}));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", describe(res).c_str());
  std::vector<pid_t> left = pids_with(token);
  for (int i = 0; i < 50 && !left.empty() && s.declared.reaps_descendants; ++i) {
    usleep(20000);  // the kernel's namespace teardown is asynchronous
    left = pids_with(token);
  }
  for (pid_t pid : left) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);  // ours when the supervisor made us a subreaper
  }
  if (s.declared.reaps_descendants)
    cr_assert(left.empty(), "tier %s declares reaps_descendants, but %zu escapee(s) outlived the run", s.name.c_str(),
              left.size());
  else
    cr_assert(!left.empty(), "no escapee survived: tier %s could declare reaps_descendants", s.name.c_str());
}

// Egress as the gate sees it on this host (host_tier_capabilities): the
// run is shaped by request_for_route from a route built through the gate.
// A run's processes, and what they fork, are what the kernel's OOM killer
// takes first (oom_score_adj 1000), never the supervisor: a run without
// memory_bytes has no cgroup of its own, and its tmpfs pages are nobody's
// RSS, so only the run's end gives them back. Old code: 0, as the
// supervisor's.
void check_is_the_first_oom_victim(std::string_view tier) {
  Subject s(tier);
  const std::string ours = corral_test::read_file("/proc/self/oom_score_adj");
  Result res = s.run(s.request({"sh", "-c", "cat /proc/self/oom_score_adj; sh -c 'cat /proc/self/oom_score_adj'"}));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", describe(res).c_str());
  cr_assert_str_eq(res.stdout_capture.text.c_str(), "1000\n1000\n", "tier %.*s: %s", (int)tier.size(), tier.data(),
                   describe(res).c_str());
  cr_assert_str_eq(corral_test::read_file("/proc/self/oom_score_adj").c_str(), ours.c_str(),
                   "the supervisor's own oom_score_adj changed");

  // From the host, with a run in flight: every process below ours but the
  // guardian (a container's pid 1 and its program included) is at 1000.
  RunCallbacks cb;
  bool done = false;
  cb.on_result = [&done](const Result&) { done = true; };
  auto handle = s.sup->submit(s.request({"sh", "-c", "sleep 5 & wait"}), std::move(cb));
  cr_assert(handle.ok(), "%s", handle.ok() ? "" : handle.error().message().c_str());
  std::vector<std::string> seen;
  for (int i = 0; i < 500 && seen.empty(); ++i) {
    cr_assert(s.sup->run_once(0.01).ok());
    std::vector<std::string> below, sleeps;
    std::vector<std::string> todo = {std::to_string(getpid())};
    while (!todo.empty()) {
      std::istringstream kids(corral_test::children_of(std::stoi(todo.back())));
      todo.pop_back();
      for (std::string k; kids >> k;) {
        const std::string comm = corral_test::read_file("/proc/" + k + "/comm");
        if (comm == "corral-guard\n") continue;
        below.push_back(k + " " + comm.substr(0, comm.size() - 1) + " " +
                        corral_test::read_file("/proc/" + k + "/oom_score_adj"));
        if (comm == "sleep\n") sleeps.push_back(k);
        todo.push_back(k);
      }
    }
    if (!sleeps.empty()) seen = below;
  }
  handle->cancel();
  while (!done) cr_assert(s.sup->run_once(1).ok());
  cr_assert(!seen.empty(), "tier %.*s: the run's sleep never showed in the host's /proc", (int)tier.size(), tier.data());
  for (const auto& line : seen)
    cr_expect(line.size() > 5 && line.compare(line.size() - 5, 5, "1000\n") == 0,
              "tier %.*s: seen from the host, pid comm oom_score_adj: %s", (int)tier.size(), tier.data(), line.c_str());
}

void check_egress(std::string_view tier) {
  Subject s(tier);
  HostFacts host = probe_host();
  auto caps = host_tier_capabilities(s.name, host);
  cr_assert(caps.ok());
  Listener allowed, other;
  auto route = [&](const std::string& egress) {
    std::string toml = "[[route]]\nname = \"r\"\nprovenance = \"trusted\"\ntier = \"" + s.name + "\"\n" + egress;
    auto file = parse_routes(toml, "claims.toml");
    cr_assert(file.ok(), "%s", file.ok() ? "" : file.error().message().c_str());
    auto router = build_routes(*file, host);
    cr_assert(router.ok(), "%s", router.ok() ? "" : router.error().message().c_str());
    return *router->find("r");
  };
  auto attempt = [&](const Route& r, std::vector<std::string> args) {
    Request base = s.staged("claims", std::move(args));
    auto request = request_for_route(r, std::move(base));
    cr_assert(request.ok(), "%s", request.ok() ? "" : request.error().message().c_str());
    return s.run(std::move(*request)).stdout_capture.text;
  };
  switch (caps->egress) {
    case Egress::unrestricted: {
      // The host's network, and no way to close it.
      cr_assert(s.declared.network);
      Route open = route("acknowledge_network_egress = true\n");
      expect_text(attempt(open, {"connect", allowed.port_text()}), "connected\n");
      Request closed = s.staged("claims", {"udp"});
      closed.net = NetworkAccess::none;
      auto refused = s.sup->run(std::move(closed));
      cr_assert(!refused.ok(), "tier %s closed the network although it declares egress unrestricted", s.name.c_str());
      cr_assert(contains(refused.error().message(), "network_none is not enforceable"), "%s",
                refused.error().message().c_str());
      break;
    }
    case Egress::allowlist: {
      Route fetch = route("egress_allow = [\"*:" + allowed.port_text() + "\"]\n");
      expect_text(attempt(fetch, {"connect", allowed.port_text()}), "connected\n");
      std::string elsewhere = attempt(fetch, {"connect", other.port_text()});
      cr_assert(contains(elsewhere, "connect: Permission denied"), "port %d: %s", other.port, elsewhere.c_str());
      std::string datagram = attempt(fetch, {"udp"});
      cr_assert(contains(datagram, "udp: Permission denied"), "UDP is not on any allow-list: %s", datagram.c_str());
      Route none = route("");
      std::string closed = attempt(none, {"connect", allowed.port_text()});
      cr_assert(contains(closed, "Permission denied"), "no egress_allow, yet: %s", closed.c_str());
      break;
    }
    case Egress::closed: {
      if (s.tier == Tier::os_process)
        cr_skip_test("Landlock ABI %d < 4: os_process can only close the network here", host.landlock_abi);
      Route none = route("");
      std::string closed = attempt(none, {"connect", allowed.port_text()});
      cr_assert(contains(closed, "connect:"), "tier %s declares egress closed, yet: %s", s.name.c_str(),
                closed.c_str());
      break;
    }
  }
}

}  // namespace

Test(tier_claims, every_corral_tier_is_covered_here) {
  std::vector<std::string> names;
  for (const auto& d : corral_tiers()) names.emplace_back(d.name);
  cr_assert(names == std::vector<std::string>({"none", "os_process", "container"}),
            "a tier was added or renamed: give it its claim tests below");
}

// A net-none run on os_process can still write its own workspace: the
// Landlock ruleset made for the TCP rules must not confine writes.
Test(tier_claims, os_process_without_network_still_writes_its_workspace) {
  Subject s("os_process");
  Request r = s.request({"sh", "-c", "echo x > made && cat made"});
  r.net = NetworkAccess::none;
  Result res = s.run(std::move(r));
  cr_assert_str_eq(res.stdout_capture.text.c_str(), "x\n", "%s", describe(res).c_str());
}

#define CLAIM(tier, claim) \
  Test(tier_claims_##tier, claim) { check_##claim(#tier); }
#define CLAIMS(tier)                    \
  CLAIM(tier, exec_and_streaming)       \
  CLAIM(tier, files_in)                 \
  CLAIM(tier, files_out_and_list)       \
  CLAIM(tier, reports_resource_kill)    \
  CLAIM(tier, enforces_memory)          \
  CLAIM(tier, reaps_descendants)        \
  CLAIM(tier, is_the_first_oom_victim)  \
  CLAIM(tier, egress)

CLAIMS(none)
CLAIMS(os_process)
CLAIMS(container)
