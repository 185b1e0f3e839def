#include "corral/isolation.hpp"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cstring>

#include "support.hpp"

using namespace corral;

namespace {

void assert_mentions(const Error& error, std::initializer_list<const char*> words) {
  for (const char* word : words)
    cr_assert(error.message().find(word) != std::string::npos, "'%s' not in: %s", word,
              error.message().c_str());
}

const TierCapabilities& declared(std::string_view name) {
  for (const auto& tier : corral_tiers())
    if (tier.name == name) return tier.capabilities;
  cr_assert_fail("no tier %.*s", (int)name.size(), name.data());
  static TierCapabilities none;
  return none;
}

}  // namespace

Test(isolation, ladder_is_ordered_and_round_trips) {
  const auto& ladder = isolation_ladder();
  for (std::size_t i = 0; i < ladder.size(); ++i) {
    auto parsed = parse_isolation(to_string(ladder[i]));
    cr_assert(parsed.ok());
    cr_assert_eq(*parsed, ladder[i]);
    if (i > 0) cr_assert(ladder[i - 1] < ladder[i]);
  }
  cr_assert(Isolation::os_process < Isolation::container);
  cr_assert(Isolation::container < Isolation::hardened_container);
  std::string text = isolation_ladder_text();
  cr_assert_str_eq(text.c_str(),
                   "none < runtime < os_process < container < hardened_container < microvm < vm");
}

Test(isolation, unknown_level_is_refused_with_the_ladder) {
  for (const char* bad : {"process", "Container", "sandbox", " none", "containers"}) {
    auto parsed = parse_isolation(bad);
    cr_assert(!parsed.ok(), "ranked '%s'", bad);
    assert_mentions(parsed.error(), {bad, "none < runtime < os_process < container"});
  }
  auto empty = parse_isolation("");
  cr_assert(!empty.ok());
  assert_mentions(empty.error(), {"isolation is empty", "no default"});
}

Test(isolation, provenance_has_no_default) {
  cr_assert_eq(*parse_provenance("trusted"), Provenance::trusted);
  cr_assert_eq(*parse_provenance("untrusted"), Provenance::untrusted);
  cr_assert(to_string(Provenance::untrusted) == "untrusted");
  auto empty = parse_provenance("");
  cr_assert(!empty.ok());
  assert_mentions(empty.error(), {"provenance is empty", "trusted, untrusted", "no default"});
  auto bad = parse_provenance("Trusted");
  cr_assert(!bad.ok());
  assert_mentions(bad.error(), {"provenance 'Trusted' is unknown"});
}

Test(isolation, egress_and_capability_names_round_trip) {
  for (auto egress : {Egress::closed, Egress::allowlist, Egress::unrestricted})
    cr_assert_eq(*parse_egress(to_string(egress)), egress);
  for (auto capability : all_capabilities())
    cr_assert_eq(*parse_capability(to_string(capability)), capability);
  auto bad = parse_capability("gpu");
  cr_assert(!bad.ok());
  assert_mentions(bad.error(), {"capability 'gpu'", "files_list"});
  cr_assert(!parse_egress("open").ok());
}

Test(isolation, has_and_describe_follow_the_fields) {
  TierCapabilities caps;
  std::string nothing = caps.describe_capabilities();
  cr_assert_str_eq(nothing.c_str(), "nothing");
  caps.exec = true;
  caps.streaming = true;
  cr_assert(caps.has(Capability::exec));
  cr_assert(!caps.has(Capability::network));
  std::string two = caps.describe_capabilities();
  cr_assert_str_eq(two.c_str(), "exec, streaming");
}

Test(isolation, corral_tiers_declare_what_the_design_says) {
  cr_assert_eq(corral_tiers().size(), 3u);
  const auto& none = declared("none");
  cr_assert_eq(none.isolation, Isolation::none);
  cr_assert(none.exec && none.files_in && none.files_out && none.files_list && none.streaming);
  cr_assert(none.network);
  cr_assert(!none.enforces_memory);
  cr_assert(none.reports_resource_kill);
  cr_assert(!none.reaps_descendants);
  cr_assert_eq(none.egress, Egress::unrestricted);

  const auto& process = declared("os_process");
  cr_assert_eq(process.isolation, Isolation::os_process);
  cr_assert(!process.enforces_memory);
  cr_assert(!process.reaps_descendants);
  cr_assert_eq(process.egress, Egress::allowlist);
  cr_assert(!process.egress_filters_hosts);

  const auto& container = declared("container");
  cr_assert_eq(container.isolation, Isolation::container);
  cr_assert(container.enforces_memory && container.reports_resource_kill &&
            container.reaps_descendants);
  cr_assert(!container.network);
  cr_assert_eq(container.egress, Egress::closed);
}

Test(isolation, tier_lookup_accepts_the_cli_short_form_and_refuses_unknown) {
  auto process = tier_capabilities("process");
  cr_assert(process.ok());
  cr_assert_eq(process->isolation, Isolation::os_process);
  auto bad = tier_capabilities("microvm");
  cr_assert(!bad.ok());
  assert_mentions(bad.error(), {"tier 'microvm'", "none, os_process, container"});
}

// ---- The kernel facts the declarations rest on. These do not run a tier
// (the run layer's tests do that); they show on this kernel why `none` and
// `os_process` must not claim enforces_memory or reaps_descendants, and why
// the pid namespace lets `container` claim it.

// RLIMIT_AS binds each process, not the tree: three children under the same
// limit together map and touch more than the headroom any one of them has.
Test(isolation_claims, rlimit_as_is_not_a_ceiling_for_the_tree) {
  auto end = corral_test::run_in_child([] {
    long page = sysconf(_SC_PAGESIZE);
    long vm_kb = std::atol(corral_test::proc_status_field("self", "VmSize").c_str());
    const std::size_t headroom = 32u << 20, each = 24u << 20;
    rlimit rl{};
    rl.rlim_cur = rl.rlim_max = static_cast<rlim_t>(vm_kb) * 1024 + headroom;
    if (setrlimit(RLIMIT_AS, &rl) != 0) return 10;
    // One process cannot exceed its headroom...
    if (mmap(nullptr, 2 * headroom, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) !=
        MAP_FAILED)
      return 11;
    // ...but three of them, alive at once, hold 72 MiB > 32 MiB.
    int hold[2];
    if (pipe(hold) != 0) return 12;
    int ready[2];
    if (pipe(ready) != 0) return 13;
    for (int i = 0; i < 3; ++i) {
      if (fork() == 0) {
        close(hold[1]);
        void* p = mmap(nullptr, each, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) _exit(1);
        for (std::size_t off = 0; off < each; off += static_cast<std::size_t>(page))
          static_cast<char*>(p)[off] = 1;
        char c = 'y';
        if (write(ready[1], &c, 1) != 1) _exit(2);
        if (read(hold[0], &c, 1) < 0) _exit(3);  // EOF when the parent lets go
        _exit(0);
      }
    }
    close(ready[1]);
    char buf[3];
    std::size_t got = 0;
    while (got < 3) {
      ssize_t n = read(ready[0], buf + got, 3 - got);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    close(hold[1]);
    int failures = 0, status = 0;
    while (wait(&status) > 0)
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
    return got == 3 && failures == 0 ? 0 : 20;
  });
  cr_assert(end.exited, "child died with signal %d", end.signal);
  cr_assert_eq(end.code, 0, "child reported %d", end.code);
}

namespace {

// Fork a child in its own process group whose grandchild calls setsid()
// and keeps `alive[1]` open until it dies. Returns the child's pid; the
// grandchild's pid arrives on alive[0] as an int.
pid_t spawn_with_setsid_escapee(int alive[2]) {
  pid_t child = fork();
  if (child == 0) {
    setpgid(0, 0);
    if (fork() == 0) {
      setsid();
      pid_t me = getpid();
      if (write(alive[1], &me, sizeof me) != sizeof me) _exit(1);
      for (;;) pause();
    }
    for (;;) pause();
  }
  setpgid(child, child);  // either side may win the race; both ask the same
  return child;
}

// True when every writer of `fd` closed within `ms` (POLLHUP or EOF).
bool writers_gone(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    if (poll(&p, 1, ms) <= 0) return false;
    char buf[64];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n == 0) return true;
    if (n < 0) return false;
  }
}

}  // namespace

// os_process kills the group; a setsid() descendant is not in it.
Test(isolation_claims, a_setsid_descendant_escapes_the_group_kill) {
  int alive[2];
  cr_assert_eq(pipe2(alive, O_CLOEXEC), 0);
  pid_t child = spawn_with_setsid_escapee(alive);
  close(alive[1]);
  pid_t escapee = 0;
  cr_assert_eq(read(alive[0], &escapee, sizeof escapee), (ssize_t)sizeof escapee);
  cr_assert_eq(killpg(child, SIGKILL), 0);
  waitpid(child, nullptr, 0);
  bool gone = writers_gone(alive[0], 300);
  kill(escapee, SIGKILL);  // it was reparented to init (or a subreaper), not ours to wait
  close(alive[0]);
  cr_assert(!gone, "the setsid() grandchild died with its old group: the claim needs revisiting");
}

// container: when the pid namespace's init exits, the kernel kills the rest.
Test(isolation_claims, a_pid_namespace_takes_every_descendant_with_it) {
  int alive[2];
  cr_assert_eq(pipe2(alive, O_CLOEXEC), 0);
  int probe[2];
  cr_assert_eq(pipe(probe), 0);
  pid_t child = fork();
  if (child == 0) {
    close(probe[0]);
    int err = unshare(CLONE_NEWPID) == 0 ? 0 : errno;
    if (write(probe[1], &err, sizeof err) != sizeof err || err != 0) _exit(1);
    if (fork() == 0) {  // pid 1 of the new namespace
      if (fork() == 0) {
        setsid();
        for (;;) pause();
      }
      _exit(0);  // init leaves; the kernel SIGKILLs the namespace
    }
    int status;
    wait(&status);
    _exit(0);
  }
  close(probe[1]);
  close(alive[1]);
  int err = -1;
  cr_assert_eq(read(probe[0], &err, sizeof err), (ssize_t)sizeof err);
  close(probe[0]);
  waitpid(child, nullptr, 0);
  if (err != 0) {
    close(alive[0]);
    cr_skip_test("unshare(CLONE_NEWPID) refused here: %s", strerror(err));
  }
  bool gone = writers_gone(alive[0], 2000);
  close(alive[0]);
  cr_assert(gone, "a setsid() process outlived its pid namespace's init");
}

// reports_resource_kill: the rlimits end the program with a signal that
// names the limit.
Test(isolation_claims, rlimit_fsize_kills_with_sigxfsz) {
  corral_test::TempDir dir;
  std::string path = dir / "big";
  auto end = corral_test::run_in_child([&] {
    signal(SIGXFSZ, SIG_DFL);
    rlimit rl{16, 16};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 10;
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char buf[64] = {};
    if (write(fd, buf, sizeof buf) < 0) return 11;
    return write(fd, buf, sizeof buf) < 0 ? 12 : 13;
  });
  cr_assert_eq(end.signal, SIGXFSZ, "exited=%d code=%d signal=%d", end.exited, end.code, end.signal);
}
