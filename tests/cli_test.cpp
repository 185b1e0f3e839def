// The CLI contract, through the real binary: exit codes, the `corral:`
// prefix, --json fields, CORRAL_LIMITS, refusals.
#include <elf.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <nlohmann/json.hpp>

#include "corral/sha256.hpp"
#include "support.hpp"

using namespace corral_test;

namespace {

struct Ran {
  int code = -1;
  std::string out, err;
};

// Runs a shell command line; stdout and stderr kept apart.
Ran shell(const std::string& line) {
  TempDir dir;
  std::string cmd = line + " >" + (dir / "out") + " 2>" + (dir / "err");
  int status = std::system(cmd.c_str());
  Ran r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(dir / "out");
  r.err = read_file(dir / "err");
  return r;
}

// Runs `corral ARGS` through sh with the given environment prefix.
Ran run_corral(const std::string& args, const std::string& env = "") {
  return shell(env + " " + build_dir() + "/bin/corral " + args);
}

void every_stderr_line_is_ours(const std::string& err) {
  std::istringstream in(err);
  std::string line;
  while (std::getline(in, line)) cr_assert(line.rfind("corral: ", 0) == 0, "stray stderr line: %s", line.c_str());
}

}  // namespace

Test(cli, version_and_help) {
  Ran v = run_corral("--version");
  cr_assert_eq(v.code, 0);
  cr_assert(contains(v.out, "corral 0."), "%s", v.out.c_str());
  Ran h = run_corral("run --help");
  cr_assert_eq(h.code, 0);
  for (const char* opt : {"--tier", "--untrusted", "--limit", "--confine-writes", "--write-path", "--net", "--env",
                          "--pass-env", "--secret-env", "--input", "--output", "--artifact-root", "--merge-output",
                          "--json", "--cwd"})
    cr_assert(contains(h.out, opt), "run --help does not mention %s", opt);
}

Test(cli, exit_codes_follow_the_contract) {
  cr_assert_eq(run_corral("run -- sh -c 'exit 7'").code, 7);
  cr_assert_eq(run_corral("run --tier none -- sh -c 'kill -SEGV $$'").code, 128 + 11);
  cr_assert_eq(run_corral("run --limit wall_seconds=1 --grace 0.1 -- sleep 30").code, 124);
  cr_assert_eq(run_corral("run --limit cpu_seconds=1 -- " + build_dir() + "/helpers/hostile spin").code, 152);
  Ran missing = run_corral("run -- corral-no-such-program");
  cr_assert_eq(missing.code, 125);
  cr_assert(contains(missing.err, "execve 'corral-no-such-program': ENOENT"), "%s", missing.err.c_str());
  Ran absolute = run_corral("run -- /nonexistent/corral-prog");
  cr_assert(contains(absolute.err, "execve '/nonexistent/corral-prog': ENOENT"), "%s", absolute.err.c_str());
  every_stderr_line_is_ours(missing.err);
  cr_assert_eq(run_corral("run -- " + build_dir() + "/helpers/hostile exit 127").code, 127);
}

Test(cli, usage_errors_and_refusals_exit_2_naming_the_problem) {
  Ran neg = run_corral("run --limit open_files=-5 -- true");
  cr_assert_eq(neg.code, 2);
  cr_assert(contains(neg.err, "open_files") && contains(neg.err, "negative"), "%s", neg.err.c_str());
  every_stderr_line_is_ours(neg.err);
  Ran unknown = run_corral("run --limit bogus=1 -- true");
  cr_assert_eq(unknown.code, 2);
  cr_assert(contains(unknown.err, "bogus"));
  Ran env = run_corral("run -- true", "CORRAL_LIMITS=cpu_seconds=x");
  cr_assert_eq(env.code, 2);
  cr_assert(contains(env.err, "CORRAL_LIMITS") && contains(env.err, "cpu_seconds"), "%s", env.err.c_str());
  Ran untrusted = run_corral("run --untrusted -- true");
  cr_assert_eq(untrusted.code, 2);
  cr_assert(contains(untrusted.err, "container"), "%s", untrusted.err.c_str());
  Ran confine = run_corral("run --tier none --confine-writes -- true");
  cr_assert_eq(confine.code, 2);
  cr_assert(contains(confine.err, "write_confinement"), "%s", confine.err.c_str());
  cr_assert_eq(run_corral("run").code, 2);
  cr_assert_eq(run_corral("frobnicate").code, 2);
}

// A run is never root: --user 0 (and forms that are not a plain uid) is a
// usage error before anything runs, in either tier, as root or not.
Test(cli, user_0_and_non_uid_forms_are_refused_with_exit_2) {
  for (const char* args : {"run --user 0 -- sh -c 'head -1 /etc/shadow'", "run --tier process --user 0 -- true",
                           "run --tier container --user 0 -- true", "run --user 0:0 -- true",
                           "run --user root -- true", "run --user -1 -- true", "run --user 4294967295 -- true",
                           "run --user 00 -- true"}) {
    Ran r = run_corral(args);
    cr_expect_eq(r.code, 2, "%s: exit %d, stdout '%s'", args, r.code, r.out.c_str());
    cr_expect(contains(r.err, "--user"), "%s: stderr '%s'", args, r.err.c_str());
    cr_expect_eq(r.out, "", "%s ran: %s", args, r.out.c_str());
  }
  cr_expect(contains(run_corral("run --user 0 -- true").err, "root"));
}

// The static CLI once asked NSS for a uid /etc/passwd lacks: a static
// glibc dlopens the host's modules, and libnss_systemd crashed it (139).
Test(cli, a_uid_without_a_passwd_entry_runs_under_its_number) {
  if (geteuid() != 0) cr_skip_test("--user in tier process needs root");
  Ran r = run_corral("run --tier process --user 5000 -- sh -c 'echo \"$USER $(id -u)\"'");
  cr_assert_eq(r.code, 0, "exit %d: %s", r.code, r.err.c_str());
  cr_assert_eq(r.out, "5000 5000\n");
}

Test(cli, a_working_directory_that_cannot_be_entered_is_named) {
  Ran r = run_corral("run --cwd /nonexistent/corral-dir -- true");
  cr_assert_eq(r.code, 125, "exit %d: %s", r.code, r.err.c_str());
  assert_mentions(r.err, {"chdir", "'/nonexistent/corral-dir'"});
}

Test(cli, json_result_has_the_contract_fields) {
  Ran r = run_corral("run --json --limit stdout_bytes=4 -- sh -c 'echo hello; echo oops >&2; exit 3'");
  cr_assert_eq(r.code, 3, "json mode keeps the program's exit code");
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  cr_assert(!j.is_discarded(), "not JSON: %s", r.out.c_str());
  for (const char* f : {"outcome", "exit_code", "signal", "stdout", "stderr", "stdout_bytes", "stdout_truncated",
                        "stdout_sha256", "stderr_bytes", "stderr_truncated", "stderr_sha256", "wall_seconds",
                        "cpu_seconds", "max_rss_bytes", "artifacts", "limits", "enforcement", "tier", "detail"})
    cr_assert(j.contains(f), "missing field %s", f);
  cr_assert_eq(j["outcome"], "exited");
  cr_assert_eq(j["stdout"], "hell");
  cr_assert_eq(j["stdout_bytes"], 6);
  cr_assert_eq(j["stdout_truncated"], true);
  cr_assert_eq(j["limits"]["stdout_bytes"], 4);
  cr_assert_eq(j["tier"], "os_process");
}

Test(cli, corral_limits_are_defaults_that_flags_override) {
  Ran r = run_corral("run --json --limit open_files=32 -- true", "CORRAL_LIMITS=open_files=64,cpu_seconds=9");
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  cr_assert(!j.is_discarded(), "%s %s", r.out.c_str(), r.err.c_str());
  cr_assert_eq(j["limits"]["open_files"], 32);
  cr_assert_eq(j["limits"]["cpu_seconds"], 9);
}

Test(cli, secrets_are_masked_in_plain_and_json_output) {
  std::string env = "CLI_SECRET=sup3r-s3cret-value";
  std::string prog = build_dir() + "/helpers/hostile secret-halves CLI_SECRET";
  Ran plain = run_corral("run --secret-env CLI_SECRET -- " + prog, env);
  cr_assert_eq(plain.code, 0, "%s", plain.err.c_str());
  cr_assert(!contains(plain.out + plain.err, "sup3r-s3cret-value"), "secret leaked: %s %s", plain.out.c_str(), plain.err.c_str());
  cr_assert(contains(plain.out, "before:***:after"), "%s", plain.out.c_str());
  Ran json = run_corral("run --json --secret-env CLI_SECRET -- " + prog, env);
  cr_assert(!contains(json.out + json.err, "sup3r"), "secret leaked in JSON: %s", json.out.c_str());
  cr_assert(contains(json.out, "before:***:after"), "%s", json.out.c_str());
}

// corral's own refusals repeated a path whole: an input or artifact root
// whose name held a secret's value printed the value (on the old code
// "input 'nonexist-sup3r-s3cret-value' from ..." in stderr).
Test(cli, a_secret_in_a_refused_path_is_masked_in_corrals_own_message) {
  std::string env = "CLI_SECRET=sup3r-s3cret-value";
  for (const char* args : {"run --secret-env CLI_SECRET --input /nonexistent/in-sup3r-s3cret-value -- true",
                           "run --secret-env CLI_SECRET --artifact-root /proc/ar-sup3r-s3cret-value --output x -- touch x",
                           "run --json --secret-env CLI_SECRET --input /nonexistent/in-sup3r-s3cret-value -- true"}) {
    Ran r = run_corral(args, env);
    cr_expect_neq(r.code, 0, "%s: exit 0", args);
    cr_expect(!contains(r.out + r.err, "sup3r-s3cret-value"), "%s: secret leaked: %s", args, r.err.c_str());
    cr_expect(contains(r.err, "***"), "%s: %s", args, r.err.c_str());
  }
}

Test(cli, enforcement_lists_limits_and_kernel_facts) {
  Ran r = run_corral("enforcement --tier process");
  cr_assert_eq(r.code, 0);
  for (const char* name : {"cpu_seconds", "memory_bytes", "process_count", "file_bytes", "open_files", "wall_seconds",
                           "write_confinement", "landlock_abi", "io_uring", "user_namespaces", "cgroups", "seccomp",
                           "pidfd"})
    cr_assert(contains(r.out, name), "enforcement does not mention %s:\n%s", name, r.out.c_str());
  // One line says whether SysV IPC and POSIX queues are the run's own.
  std::string ipc = "  ipc" + std::string(20, ' ') + (geteuid() == 0 ? "hard_per_run" : "shared");
  cr_assert(contains(r.out, ipc), "no '%s' line:\n%s", ipc.c_str(), r.out.c_str());
  Ran j = run_corral("enforcement --json --tier none");
  cr_assert(!nlohmann::json::parse(j.out, nullptr, false).is_discarded());
}

// The CLI is a static PIE (the Makefile says why: a one-run `corral run` is
// mostly process start): no program interpreter, position-independent. A
// sanitizer build links it dynamically, so this test skips there.
Test(cli, the_binary_is_a_static_pie) {
#if defined(__SANITIZE_ADDRESS__)
  cr_skip_test("sanitizer build: the CLI is linked dynamically (ASan has no static runtime)");
#endif
  // The ELF header and the program headers sit at the start of the file.
  std::string elf(65536, '\0');
  FILE* f = std::fopen((build_dir() + "/bin/corral").c_str(), "rb");
  cr_assert_not_null(f);
  elf.resize(std::fread(elf.data(), 1, elf.size(), f));
  std::fclose(f);
  cr_assert_geq(elf.size(), sizeof(Elf64_Ehdr));
  Elf64_Ehdr eh;
  std::memcpy(&eh, elf.data(), sizeof eh);
  cr_assert_eq(std::memcmp(eh.e_ident, ELFMAG, SELFMAG), 0, "not an ELF file");
  cr_assert_eq(eh.e_type, ET_DYN, "not position-independent (e_type %u)", eh.e_type);
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    cr_assert_leq(eh.e_phoff + (i + 1) * sizeof ph, elf.size());
    std::memcpy(&ph, elf.data() + eh.e_phoff + i * sizeof ph, sizeof ph);
    cr_assert_neq(ph.p_type, PT_INTERP, "the CLI names a dynamic loader");
  }
}

namespace {

// The page faults the CLI takes from its exec to its exit with `args`, its
// own only (not its children's). Counted, not timed, by a perf software
// counter that starts at the exec; faults the kernel takes for madvise are
// not traps and not counted there. Skips the test where that cannot be
// counted or the kernel has no MADV_POPULATE_READ/WRITE.
std::uint64_t cli_page_faults(const std::vector<std::string>& args) {
#if defined(__SANITIZE_ADDRESS__)
  cr_skip_test("sanitizer build: the CLI is linked dynamically, the loader maps it");
#endif
  utsname u{};
  int major = 0, minor = 0;
  cr_assert_eq(uname(&u), 0);
  std::sscanf(u.release, "%d.%d", &major, &minor);
  if (major < 5 || (major == 5 && minor < 14))
    cr_skip_test("kernel %s has no MADV_POPULATE_READ/WRITE (Linux 5.14): the CLI faults its pages in", u.release);
  const std::string bin = build_dir() + "/bin/corral";
  std::vector<char*> argv{const_cast<char*>(bin.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int go[2];
  cr_assert_eq(pipe(go), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    close(go[1]);
    char byte;
    if (read(go[0], &byte, 1) != 1) _exit(126);  // the counter is open
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  close(go[0]);
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_PAGE_FAULTS;
  attr.disabled = 1;
  attr.enable_on_exec = 1;
  int counter = static_cast<int>(syscall(SYS_perf_event_open, &attr, pid, -1, -1, PERF_FLAG_FD_CLOEXEC));
  const int open_errno = errno;
  cr_assert_eq(write(go[1], "g", 1), 1);
  close(go[1]);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  if (counter < 0) cr_skip_test("perf_event_open: %s: no page-fault counter here", std::strerror(open_errno));
  std::uint64_t faults = 0;
  cr_assert_eq(read(counter, &faults, sizeof faults), static_cast<ssize_t>(sizeof faults));
  close(counter);
  return faults;
}

// Starts `corral run --tier none -- /bin/sleep SECONDS` with its stdio on
// /dev/null, for a look at the live CLI from outside (/proc/PID/maps); the
// caller ends it with SIGTERM and reaps it.
pid_t start_cli_whose_run_sleeps(const std::string& bin, const char* seconds) {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
    execl(bin.c_str(), bin.c_str(), "run", "--tier", "none", "--", "/bin/sleep", seconds, static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

}  // namespace

// The static CLI's entry makes its writable data pages in a few madvise
// calls before glibc starts (src/cli/start.cpp), so the self-relocation's
// writes to .data.rel.ro and .got take no copy-on-write fault each:
// `corral --version` took 62 page faults with no entry, 37 with the data
// made, 20 with the hot code mapped too (this host, Linux 6.18); the ~20
// relocation faults put it back above 48.
Test(cli, the_cli_start_makes_its_writable_pages_in_a_few_calls) {
  const std::uint64_t faults = cli_page_faults({"--version"});
  cr_assert_lt(faults, 48u, "corral --version took %llu page faults (with the entry's madvise calls: ~20)",
               static_cast<unsigned long long>(faults));
}

// The code a one-run `corral run` executes is gathered in one range that
// the entry maps in one call (src/cli/start.cpp, 5.; src/cli/hot_text.ld).
// Scattered over the text, that code took ~45 read faults a run: 73 page
// faults in all for `corral run --tier none -- /bin/true`, 79 in tier
// process, against 31 and 35 with it mapped (this host, Linux 6.18). Past
// 48 the hot list has gone stale, or the range is no longer mapped:
// scripts/hot-text writes it again.
Test(cli, a_one_run_corral_run_finds_its_code_mapped) {
  for (const char* tier : {"none", "process"}) {
    const std::uint64_t faults = cli_page_faults({"run", "--tier", tier, "--", "/bin/true"});
    cr_expect_lt(faults, 48u, "corral run --tier %s -- /bin/true took %llu page faults (with its code mapped: ~31-35)",
                 tier, static_cast<unsigned long long>(faults));
  }
}

// The static CLI's heap is mapped beside the rest of the process, not at a
// break of its own (src/cli/start.cpp, 6.): a static PIE's break lies far
// from every other mapping, so its first write needs page tables of its
// own at three levels (68-700 us with shadow page tables here). The entry
// blocks the break with one PROT_NONE page, and glibc takes its TLS block
// and its main arena from mmap. Seen from outside, in /proc/PID/maps of a
// CLI whose run is still going: no writable [heap].
Test(cli, the_static_cli_keeps_its_heap_beside_its_other_mappings) {
#if defined(__SANITIZE_ADDRESS__)
  cr_skip_test("sanitizer build: the CLI is linked dynamically, without the static entry");
#endif
  const pid_t pid = start_cli_whose_run_sleeps(build_dir() + "/bin/corral", "3");
  // Its supervisor is up (and has used its heap) once io_uring is mapped.
  const std::string maps_path = "/proc/" + std::to_string(pid) + "/maps";
  std::string maps;
  for (int i = 0; i < 400 && maps.find("io_uring") == std::string::npos; ++i) {
    usleep(5000);
    maps = read_file(maps_path);
  }
  kill(pid, SIGTERM);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert_neq(maps.find("io_uring"), std::string::npos, "the CLI never mapped its io_uring:\n%s", maps.c_str());
  std::size_t at = 0;
  while ((at = maps.find("[heap]", at)) != std::string::npos) {
    const std::size_t line = maps.rfind('\n', at) + 1;  // npos + 1 == 0
    const std::string entry = maps.substr(line, at - line);
    cr_expect_eq(entry.find(" rw"), std::string::npos, "the CLI writes at its break: %s[heap]", entry.c_str());
    at += 6;
  }
}

// The code a one-run `corral run` executes lies on few pages, not only in
// one range: the hot list orders the functions such runs execute by when
// they first run (scripts/hot-text, from a trace of every instruction).
// Each code page a process touches first costs it a fault or, on a host
// with shadow page tables, a hypervisor exit even when the entry mapped it
// (~5 us a page here). `corral run --tier none -- /bin/true` executed
// ~33,000 distinct instructions from 236 pages with the list of whole
// executed pages, 134 with functions in first-run order (this host). Past
// 170 the list has gone stale: scripts/hot-text writes it again.
Test(cli, a_one_run_corral_run_executes_its_code_from_few_pages, .timeout = 240) {
#if defined(__SANITIZE_ADDRESS__)
  cr_skip_test("sanitizer build: the CLI is linked dynamically, its code is in several objects");
#endif
  char trace[] = "/tmp/corral-trace-XXXXXX";
  int fd = mkstemp(trace);
  cr_assert_geq(fd, 0);
  close(fd);
  const std::string bin = build_dir() + "/bin/corral";
  const std::string cmd = build_dir() + "/helpers/trace_text " + trace + " " + bin +
                          " run --tier none -- /bin/true >/dev/null";
  const int status = std::system(cmd.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
    unlink(trace);
    cr_skip_test("this host does not let a process be traced (ptrace): the code pages cannot be counted");
  }
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "trace_text of a one-run corral run failed (%d)", status);
  std::set<unsigned long long> pages;
  std::size_t instructions = 0;
  FILE* f = std::fopen(trace, "r");
  cr_assert_not_null(f);
  unsigned long long offset;
  while (std::fscanf(f, "%llx", &offset) == 1) {
    instructions++;
    pages.insert(offset / 4096);
  }
  std::fclose(f);
  unlink(trace);
  cr_assert_gt(instructions, 1000u, "the trace holds %zu instructions", instructions);
  cr_expect_leq(pages.size(), 170u,
                "corral run --tier none -- /bin/true executed %zu distinct instructions from %zu code pages "
                "(in first-run order: ~134)",
                instructions, pages.size());
}

// The CLI's RELRO (.data.rel.ro, .got: made read-only by glibc after the
// self-relocation) spans more than 33 pages, so that mprotect flushes the
// TLB once instead of once a page (src/cli/start.cpp: a pad of never-touched
// pages; each INVLPG traps to the hypervisor here, ~0.3 ms of a one-run
// `corral run` with the old 17 pages). And it is still read-only in a live
// corral: the pad does not cost the protection.
Test(cli, the_clis_relro_spans_past_the_flush_ceiling_and_is_read_only) {
#if defined(__SANITIZE_ADDRESS__)
  cr_skip_test("sanitizer build: the CLI is linked dynamically, the loader applies RELRO");
#endif
  const std::string bin = build_dir() + "/bin/corral";
  std::string elf(65536, '\0');
  FILE* f = std::fopen(bin.c_str(), "rb");
  cr_assert_not_null(f);
  elf.resize(std::fread(elf.data(), 1, elf.size(), f));
  std::fclose(f);
  Elf64_Ehdr eh;
  cr_assert_geq(elf.size(), sizeof eh);
  std::memcpy(&eh, elf.data(), sizeof eh);
  const std::uint64_t page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  std::uint64_t relro_start = 0, relro_end = 0;
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    cr_assert_leq(eh.e_phoff + (i + 1) * sizeof ph, elf.size());
    std::memcpy(&ph, elf.data() + eh.e_phoff + i * sizeof ph, sizeof ph);
    if (ph.p_type != PT_GNU_RELRO) continue;
    relro_start = ph.p_vaddr & ~(page - 1);
    relro_end = (ph.p_vaddr + ph.p_memsz) & ~(page - 1);  // glibc protects whole pages only
  }
  cr_assert_gt(relro_end, relro_start, "the CLI has no PT_GNU_RELRO");
  cr_assert_gt((relro_end - relro_start) / page, 33u, "RELRO spans %llu pages: mprotect flushes them one by one",
               static_cast<unsigned long long>((relro_end - relro_start) / page));

  // A live corral (its run sleeps): RELRO's pages are mapped read-only.
  const pid_t pid = start_cli_whose_run_sleeps(bin, "30");
  const std::string maps_path = "/proc/" + std::to_string(pid) + "/maps";
  std::string found;
  // Until corral's start-up is done (then the sleep's fork shows it running);
  // a RELRO that stays writable is never found.
  for (int tries = 0; tries < 500 && found.empty(); ++tries) {
    std::istringstream maps(read_file(maps_path));
    std::string line;
    std::uint64_t base = 0;
    bool have_base = false;
    while (std::getline(maps, line)) {
      unsigned long long lo = 0, hi = 0, off = 0;
      char perms[5] = {};
      if (std::sscanf(line.c_str(), "%llx-%llx %4s %llx", &lo, &hi, perms, &off) != 4) continue;
      if (line.find(bin.substr(bin.rfind('/'))) == std::string::npos) continue;
      if (!have_base && off == 0) base = lo, have_base = true;
      if (have_base && lo <= base + relro_start && hi >= base + relro_end && std::string(perms) == "r--p")
        found = line;
    }
    if (found.empty()) usleep(10000);
  }
  kill(pid, SIGTERM);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(!found.empty(), "no read-only mapping covers RELRO in %s", maps_path.c_str());
}

// glibc's static start-up reads the link /proc/self/exe for a $ORIGIN no
// corral path uses (70-100 us here); src/cli/start.cpp answers "unknown"
// without it. Run under a seccomp filter that kills the process at any
// readlink or readlinkat, `corral --version` and a tier-none run still exit
// 0 (the old binary died of SIGSYS in glibc's start-up, before main).
Test(cli, the_cli_start_reads_no_link) {
#if defined(__SANITIZE_ADDRESS__)
  cr_skip_test("sanitizer build: the CLI is linked dynamically, glibc's loader starts it");
#endif
  const std::string bin = build_dir() + "/bin/corral";
  for (const char* tier : {"", "none"}) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
      int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      dup2(null, 2);
      sock_filter code[] = {
          BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_readlink, 2, 0),
          BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_readlinkat, 1, 0),
          BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
          BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      };
      sock_fprog prog{static_cast<unsigned short>(sizeof code / sizeof code[0]), code};
      if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        _exit(126);
      if (*tier) execl(bin.c_str(), bin.c_str(), "run", "--tier", tier, "--", "/bin/true", static_cast<char*>(nullptr));
      else execl(bin.c_str(), bin.c_str(), "--version", static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "corral %s: %s %d (SIGSYS is %d: a readlink)",
              *tier ? "run --tier none -- /bin/true" : "--version", WIFEXITED(status) ? "exit" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), SIGSYS);
  }
}

// The static CLI fills OpenSSL's CPU capability words from glibc's answers
// instead of letting libcrypto run CPUID again (src/cli/start.cpp): its
// SHA-256 of a run's output must be the library's, over many blocks and a
// partial one, and of "abc" (FIPS 180-2's example).
Test(cli, the_clis_sha256_is_the_librarys) {
  TempDir dir;
  std::string data;
  for (int i = 0; data.size() < (3u << 20) + 17; ++i) data += "line " + std::to_string(i * 7919) + "\n";
  {
    FILE* f = std::fopen((dir / "data").c_str(), "wb");
    cr_assert_not_null(f);
    cr_assert_eq(std::fwrite(data.data(), 1, data.size(), f), data.size());
    std::fclose(f);
  }
  corral::Sha256 h;
  h.update(data);
  Ran r = run_corral("run --tier none --json --limit stdout_bytes=8MiB -- /bin/cat " + (dir / "data"));
  cr_assert_eq(r.code, 0, "%s", r.err.c_str());
  auto j = nlohmann::json::parse(r.out);
  cr_assert_eq(j["stdout_sha256"].get<std::string>(), h.hex_digest(), "the CLI's digest differs from the library's");
  Ran abc = run_corral("run --tier none --json -- /usr/bin/printf abc");
  cr_assert_eq(abc.code, 0, "%s", abc.err.c_str());
  cr_assert_eq(nlohmann::json::parse(abc.out)["stdout_sha256"].get<std::string>(),
               "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

// getopt_long in every verb: both spellings of a value, short forms, `--`
// optional, an unknown option before PROGRAM a usage error (it used to be
// run as the program: `corral run -t container -- true` exec'd "-t").
Test(cli, options_follow_getopt_long_conventions) {
  Ran eq = run_corral("run --json --tier=none --limit=wall_seconds=7 -- true");
  cr_assert_eq(eq.code, 0, "%s", eq.err.c_str());
  auto j = nlohmann::json::parse(eq.out, nullptr, false);
  cr_assert(!j.is_discarded(), "%s", eq.out.c_str());
  cr_assert_eq(j["tier"], "none");
  cr_assert_eq(j["limits"]["wall_seconds"], 7);
  Ran shorts = run_corral("run -j -t none -l wall_seconds=8 -e GREETING=hi sh -c 'echo $GREETING'");
  cr_assert_eq(shorts.code, 0, "%s", shorts.err.c_str());
  auto s = nlohmann::json::parse(shorts.out, nullptr, false);
  cr_assert(!s.is_discarded(), "%s", shorts.out.c_str());
  cr_assert_eq(s["stdout"], "hi\n");
  cr_assert_eq(s["limits"]["wall_seconds"], 8);
  Ran bogus = run_corral("run --bogus -- true");
  cr_assert_eq(bogus.code, 2);
  cr_assert(contains(bogus.err, "unknown option --bogus"), "%s", bogus.err.c_str());
  every_stderr_line_is_ours(bogus.err);
  Ran short_bogus = run_corral("run -Z -- true");
  cr_assert_eq(short_bogus.code, 2);
  cr_assert(contains(short_bogus.err, "unknown option -Z"), "%s", short_bogus.err.c_str());
  Ran missing = run_corral("run --tier");
  cr_assert_eq(missing.code, 2);
  cr_assert(contains(missing.err, "--tier needs a value"), "%s", missing.err.c_str());
  // The program's own options stay its own.
  Ran own = run_corral("run -t none sh -c 'echo $1' sh --json");
  cr_assert_eq(own.code, 0, "%s", own.err.c_str());
  cr_assert_str_eq(own.out.c_str(), "--json\n");
  cr_assert_eq(run_corral("enforcement -t none -j").code, 0);
  cr_assert_eq(run_corral("enforcement --bogus").code, 2);
  cr_assert_eq(run_corral("check --routes=examples/routes.toml").code, 0);
  cr_assert_eq(run_corral("templates --bogus").code, 2);
}

// Issue 14: values beyond a limit's mechanism, empty paths.
Test(cli, bad_input_is_refused_by_name) {
  Ran wrapped = run_corral("run --tier none --limit wall_seconds=9223372036854775807 -- sleep 1");
  cr_assert_eq(wrapped.code, 2, "exit %d (it used to end killed_timeout at once): %s", wrapped.code,
               wrapped.err.c_str());
  cr_assert(contains(wrapped.err, "wall_seconds") && contains(wrapped.err, "maximum"), "%s", wrapped.err.c_str());
  Ran env_wrapped = run_corral("run --tier none -- true", "CORRAL_LIMITS=cpu_seconds=9223372036854775807");
  cr_assert_eq(env_wrapped.code, 2);
  Ran cwd = run_corral("run --tier none --cwd '' -- pwd");
  cr_assert_eq(cwd.code, 2, "exit %d: %s %s", cwd.code, cwd.out.c_str(), cwd.err.c_str());
  cr_assert(contains(cwd.err, "--cwd: empty path"), "%s", cwd.err.c_str());
  for (const char* flag : {"--write-path ''", "--artifact-root ''", "--input ''"}) {
    Ran empty = run_corral(std::string("run --tier none ") + flag + " -- true");
    cr_assert_eq(empty.code, 2, "%s: exit %d: %s", flag, empty.code, empty.err.c_str());
    cr_assert(contains(empty.err, "empty path"), "%s: %s", flag, empty.err.c_str());
  }
}

// ---- outputs: names and the artifact root ------------------------------------

Test(cli, one_bad_name_does_not_cancel_the_copy) {
  TempDir scripts, root;
  write_file(scripts / "mk.sh",
             "echo good > zz.txt; echo b > 'a\\b.txt'; echo l > \"$(printf 'bad\\377.txt')\"; "
             "echo c > \"$(printf 'ctl\\001.txt')\"\n");
  Ran r = run_corral("run --json --tier none --output '*' --artifact-root " + root.path() + " -- sh " + (scripts / "mk.sh"));
  cr_assert_eq(r.code, 0, "%s", r.err.c_str());
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  cr_assert(!j.is_discarded(), "not JSON: %s", r.out.c_str());
  cr_assert_eq(j["artifacts"].size(), 1u, "%s", r.out.c_str());
  cr_assert_eq(j["artifacts"][0]["name"], "zz.txt");
  std::string path = j["artifacts"][0]["path"];
  cr_assert_eq(read_file(path), "good\n");
  std::string notes = j["artifact_notes"].dump();
  for (const char* why : {"backslash", "not valid UTF-8", "control character"})
    cr_assert(contains(notes, why), "no note says '%s': %s", why, notes.c_str());
  auto tree = tree_of(root.path());
  cr_assert_eq(tree.size(), 2u, "on disk: %s", r.out.c_str());  // <run-id>/ and <run-id>/zz.txt
}

// Each output note is printed once, as the Result has it: it names its
// subject already ("outputs refused ...", "outputs: output 'l*': ...").
Test(cli, an_output_note_is_printed_as_the_result_has_it) {
  // (An output corral would refuse by its name stops the run before it
  // starts: cli_refusal_test. A cap is known only after the run.)
  Ran refused = run_corral("run --tier none -l artifact_bytes=2 --output x -- sh -c 'echo hello > x'");
  cr_assert_eq(refused.code, 0, "%s", refused.err.c_str());
  cr_assert(contains(refused.err, "corral: outputs refused (cap_exceeded): "), "%s", refused.err.c_str());
  Ran link = run_corral("run --tier none --output 'l*' -- ln -s /etc/passwd link");
  cr_assert_eq(link.code, 0, "%s", link.err.c_str());
  cr_assert(contains(link.err, "corral: outputs: output 'l*': 'link' is a symlink"), "%s", link.err.c_str());
  cr_assert(!contains(refused.err + link.err, "output outputs"), "%s%s", refused.err.c_str(), link.err.c_str());
}

Test(cli, a_secret_in_a_file_name_reaches_neither_stdout_nor_the_disk) {
  TempDir scripts, root;
  write_file(scripts / "mk.sh", "echo s > \"$CLI_NAME_SECRET.txt\"; echo p > plain.txt\n");
  std::string args = "--tier none --secret-env CLI_NAME_SECRET --output '*' --artifact-root " + root.path() +
                     " -- sh " + (scripts / "mk.sh");
  Ran json = run_corral("run --json " + args, "CLI_NAME_SECRET=TopSecret123");
  cr_assert_eq(json.code, 0, "%s", json.err.c_str());
  cr_assert(!contains(json.out + json.err, "TopSecret123"), "the secret leaked: %s %s", json.out.c_str(), json.err.c_str());
  cr_assert(contains(json.out, "***.txt"), "%s", json.out.c_str());
  Ran plain = run_corral("run " + args, "CLI_NAME_SECRET=TopSecret123");
  cr_assert_eq(plain.code, 0, "%s", plain.err.c_str());
  cr_assert(!contains(plain.out + plain.err, "TopSecret123"), "the secret leaked: %s", plain.err.c_str());
  cr_assert(contains(plain.err, "corral: outputs: ***.txt"), "%s", plain.err.c_str());
  auto tree = tree_of(root.path());
  for (const auto& name : tree) cr_assert(!contains(name, "TopSecret123"), "on disk: %s", name.c_str());
  cr_assert_eq(tree.size(), 4u, "two runs, each <run-id>/plain.txt");
}

Test(cli, a_bad_artifact_root_exits_2_before_the_program_runs) {
  TempDir scratch;
  write_file(scratch / "a-file", "x");
  const std::string marker = scratch / "ran";
  auto refused = [&](const std::string& root, const std::string& why, const std::string& prefix = "") {
    Ran r = prefix.empty()
                ? run_corral("run --tier none --output \"*\" --artifact-root " + root + " -- touch " + marker)
                : shell(prefix + " " + build_dir() + "/bin/corral run --tier none --output \"*\" --artifact-root " +
                        root + " -- touch " + marker + "'");
    if (r.code == 99) cr_skip_test("cannot make a read-only bind mount here: %s", r.err.c_str());
    cr_assert_eq(r.code, 2, "artifact root %s: exit %d: %s", root.c_str(), r.code, r.err.c_str());
    cr_assert(contains(r.err, root) && contains(r.err, why), "%s", r.err.c_str());
    every_stderr_line_is_ours(r.err);
    cr_assert(access(marker.c_str(), F_OK) != 0, "the program ran (artifact root %s)", root.c_str());
  };
  refused(scratch / "no-such-dir", "No such file or directory");
  refused(scratch / "a-file", "not a directory");
  // Root bypasses mode bits, so "not writable" is a read-only mount: a
  // bind mount of a writable directory, made read-only in a mount
  // namespace of the test's own.
  std::string ro = scratch / "ro";
  std::filesystem::create_directory(ro);
  refused(ro, "Read-only file system",
          "unshare -m sh -c 'mount --bind " + ro + " " + ro + " && mount -o remount,bind,ro " + ro +
              " || exit 99; exec");
}

// A socket() refused under --net none is said to be corral's: one `corral:`
// line in plain mode with the count and what would allow it, the count in
// --json's refused_syscalls; a run that makes no socket call gets no line.
Test(cli, refused_socket_calls_get_a_corral_note) {
  const std::string prog = build_dir() + "/helpers/compat";
  Ran plain = run_corral("run --net none -- " + prog + " sockets 3");
  cr_assert_eq(plain.code, 0, "%s", plain.err.c_str());
  cr_expect(contains(plain.out, "socket_eacces=3"), "%s", plain.out.c_str());
  cr_expect(contains(plain.err, "corral: 3 socket() calls refused (--net none"), "%s", plain.err.c_str());
  every_stderr_line_is_ours(plain.err);
  Ran json = run_corral("run --json --net none -- " + prog + " sockets 2");
  auto j = nlohmann::json::parse(json.out, nullptr, false);
  cr_assert(!j.is_discarded(), "%s %s", json.out.c_str(), json.err.c_str());
  cr_expect_eq(j["refused_syscalls"]["socket"], 2);
  cr_expect(!contains(json.err, "refused"), "--json carries the count, not a line: %s", json.err.c_str());
  Ran quiet = run_corral("run --net none -- " + prog + " whoami");
  cr_expect(!contains(quiet.err, "refused"), "%s", quiet.err.c_str());
}

namespace {

// The pids a program wrote to DIR/<name>, one per file.
pid_t pid_in(const corral_test::TempDir& dir, const std::string& name) {
  std::string text = read_file(dir / name);
  return text.empty() ? 0 : static_cast<pid_t>(std::stol(text));
}

}  // namespace

// `corral run` is one run per process: every child it has as the subreaper
// is that run's. On the old CLI a setsid escapee of tier none, and the
// child it forked, outlived `corral run` (reparented to init), whether the
// program exited or met its deadline: the README's "a setsid escapee
// leaves it". Now nothing the run started outlives the command.
Test(cli, nothing_a_tier_none_run_started_outlives_corral_run, .timeout = 60) {
  for (const char* how : {"exits", "deadline"}) {
    corral_test::TempDir dir;
    const std::string d = dir.path();
    // The escapee leaves the group (setsid) and forks a child of its own;
    // both write their pids, then the leader exits or sleeps past its
    // deadline. (The script goes through two shells: `\$` reaches the inner.)
    // The leader goes on once the escapee has written its pid (a loaded
    // host may take longer than a fixed sleep to start it).
    const std::string born = wait_for_file_sh(d + "/escapee") + "; ";
    const std::string leader_end = born + (std::string(how) == "exits" ? "true" : "sleep 30");
    const std::string script = "setsid sh -c 'sleep 300 & echo \\$! > " + d + "/grandchild; echo \\$\\$ > " + d +
                               "/escapee; exec sleep 301' </dev/null >/dev/null 2>&1 & " + leader_end;
    const std::string limit = std::string(how) == "deadline" ? "--limit wall_seconds=1 --grace 0.1 " : "";
    Ran r = run_corral("run --tier none " + limit + "-- sh -c \"" + script + "\"");
    cr_assert_eq(r.code, std::string(how) == "exits" ? 0 : 124, "%s: exit %d: %s", how, r.code, r.err.c_str());
    const pid_t escapee = pid_in(dir, "escapee"), grandchild = pid_in(dir, "grandchild");
    cr_assert(escapee > 0 && grandchild > 0, "%s: the escapee did not start", how);
    const bool left = alive(escapee) || alive(grandchild);
    if (left) {
      (void)kill(escapee, SIGKILL);
      (void)kill(grandchild, SIGKILL);
    }
    cr_assert(!left, "%s: the setsid escapee (%d) or its child (%d) outlived corral run", how, escapee, grandchild);
  }
}

// corral batch: every child of the batch is a job's or a session keeper's,
// so what a job left goes too. On the old CLI a tier none job's setsid
// escapee, and the child it forked, outlived the job and the batch
// (reparented to init), whether the job exited or met its deadline. Now
// they die when a leader exits with nothing else in flight, when the loop
// goes idle, or at the latest when the batch ends. A third job in flight
// while the others end makes the deferred path the one taken.
Test(cli, nothing_a_tier_none_batch_job_started_outlives_the_batch, .timeout = 60) {
  corral_test::TempDir dir;
  const std::string d = dir.path();
  auto job = [&](const std::string& id, const std::string& leader_end, const std::string& limits) {
    // argv goes to sh as it is: the single quotes keep $! and $$ for the inner one.
    const std::string script = "setsid sh -c 'sleep 300 & echo $! > " + d + "/" + id +
                               ".grandchild; echo $$ > " + d + "/" + id +
                               ".escapee; exec sleep 301' </dev/null >/dev/null 2>&1 & " + leader_end;
    return "{\"id\": \"" + id + "\", \"tier\": \"none\", \"argv\": [\"sh\", \"-c\", \"" + script + "\"]" + limits +
           "}\n";
  };
  write_file(dir / "jobs.jsonl", job("exits", "sleep 0.3", "") +
                                     job("deadline", "sleep 30", ", \"limits\": {\"wall_seconds\": 1}, \"grace_seconds\": 0.1") +
                                     "{\"id\": \"beside\", \"tier\": \"none\", \"argv\": [\"sleep\", \"2\"]}\n");
  Ran r = run_corral("batch --parallel 3 " + d + "/jobs.jsonl");
  cr_assert_eq(r.code, 0, "exit %d: %s", r.code, r.err.c_str());
  cr_expect(contains(r.out, "\"killed_timeout\""), "%s", r.out.c_str());
  for (const char* id : {"exits", "deadline"}) {
    const pid_t escapee = pid_in(dir, std::string(id) + ".escapee");
    const pid_t grandchild = pid_in(dir, std::string(id) + ".grandchild");
    cr_assert(escapee > 0 && grandchild > 0, "%s: the escapee did not start: %s", id, r.out.c_str());
    const bool left = alive(escapee) || alive(grandchild);
    if (left) {
      (void)kill(escapee, SIGKILL);
      (void)kill(grandchild, SIGKILL);
    }
    cr_expect(!left, "%s: the setsid escapee (%d) or its child (%d) outlived corral batch", id, escapee, grandchild);
  }
}
