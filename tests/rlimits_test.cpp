#include "corral/rlimits.hpp"

#include <linux/capability.h>
#include <signal.h>
#include <time.h>

#include <sstream>

#include "corral/capabilities.hpp"
#include "support.hpp"

using namespace corral;
using corral_test::ChildEnd;
using corral_test::run_in_child;
using corral_test::run_in_child_reporting;

namespace {

// A child applies `set` and reports its /proc/self/limits; "" when the
// apply failed (the exit code is then 100 + errno).
corral_test::ChildReport limits_after(const RlimitSet& set) {
  return run_in_child_reporting([&](int fd) {
    if (int err = apply_rlimits_in_child(set)) return 100 + err;
    corral_test::report(fd, corral_test::read_file("/proc/self/limits"));
    return 0;
  });
}

// "soft hard" of one row of /proc/self/limits text ("Max open files").
std::string row(const std::string& limits, const std::string& name) {
  std::istringstream in(limits);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, name.size(), name) != 0 || line.size() <= name.size() || line[name.size()] != ' ')
      continue;
    std::istringstream cols(line.substr(name.size()));
    std::string soft, hard;
    cols >> soft >> hard;
    return soft + " " + hard;
  }
  return "<no row " + name + ">";
}

void expect_row(const std::string& limits, const std::string& name, const std::string& want) {
  std::string got = row(limits, name);
  cr_expect_eq(got, want, "%s: got '%s', want '%s'", name.c_str(), got.c_str(), want.c_str());
}

void expect_error_mentions(const Error& e, const char* word) {
  cr_expect(e.message().find(word) != std::string::npos, "message '%s' does not mention '%s'",
            e.message().c_str(), word);
}

RlimitSet from(const Limits& limits) {
  auto set = rlimits_from_limits(limits);
  cr_assert(set.ok(), "%s", set.ok() ? "" : set.error().message().c_str());
  return *set;
}

}  // namespace

Test(rlimits, child_sees_each_mapped_limit) {
  Limits limits;
  limits.set(Limit::open_files, 64)
      .set(Limit::cpu_seconds, 7)
      .set(Limit::memory_bytes, 1ULL << 30)
      .set(Limit::file_bytes, 123456)
      .set(Limit::process_count, 77)
      .set(Limit::wall_seconds, 3);  // not an rlimit: ignored
  auto out = limits_after(from(limits));
  cr_assert(out.end.exited && out.end.code == 0, "child exit %d signal %d", out.end.code, out.end.signal);
  expect_row(out.output, "Max open files", "64 64");
  expect_row(out.output, "Max cpu time", "7 8");  // hard = soft + 1: SIGXCPU first
  expect_row(out.output, "Max address space", "1073741824 1073741824");
  expect_row(out.output, "Max file size", "123456 123456");
  expect_row(out.output, "Max processes", "77 77");
  expect_row(out.output, "Max core file size", "0 0");
}

Test(rlimits, core_dumps_off_unless_set) {
  RlimitSet set;
  cr_assert_eq(set.size(), 1u);
  cr_assert_not_null(set.find(RLIMIT_CORE));
  expect_row(limits_after(set).output, "Max core file size", "0 0");
  expect_row(limits_after(from(Limits{})).output, "Max core file size", "0 0");
  set.set(RLIMIT_CORE, 4096, 8192);
  cr_assert_eq(set.size(), 1u, "RLIMIT_CORE replaced, not added");
  expect_row(limits_after(set).output, "Max core file size", "4096 8192");
}

Test(rlimits, later_set_replaces_earlier) {
  RlimitSet set;
  set.set(RLIMIT_NOFILE, 32).set(RLIMIT_NOFILE, 48, 50);
  cr_assert(set.status().ok());
  cr_assert_eq(set.size(), 2u);
  expect_row(limits_after(set).output, "Max open files", "48 50");
}

Test(rlimits, file_bytes_gives_sigxfsz) {
  corral_test::TempDir dir;
  std::string path = dir / "big";
  Limits limits;
  limits.set(Limit::file_bytes, 1000);
  RlimitSet set = from(limits);
  ChildEnd end = run_in_child([&] {
    if (apply_rlimits_in_child(set) != 0) return 2;
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char buf[2000] = {};
    // The first write stops short at 1000 bytes; the next one is past the
    // limit and gets SIGXFSZ.
    for (size_t done = 0; done < sizeof buf;) {
      ssize_t n = write(fd, buf + done, sizeof buf - done);
      if (n <= 0) return 3;
      done += static_cast<size_t>(n);
    }
    return 0;
  });
  cr_expect_eq(end.signal, SIGXFSZ, "exited=%d code=%d signal=%d", end.exited, end.code, end.signal);
  struct stat st {};
  cr_assert_eq(stat(path.c_str(), &st), 0);
  cr_expect_eq(st.st_size, 1000);
}

Test(rlimits, cpu_seconds_gives_sigxcpu) {
  Limits limits;
  limits.set(Limit::cpu_seconds, 1);
  RlimitSet set = from(limits);
  ChildEnd end = run_in_child([&] {
    if (apply_rlimits_in_child(set) != 0) return 2;
    // Spin on CPU; give up after 20 s of wall time so a broken limit fails
    // the test instead of hanging it.
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    volatile unsigned long x = 0;
    do {
      for (int i = 0; i < 1000000; ++i) x = x + 1;
      clock_gettime(CLOCK_MONOTONIC, &now);
    } while (now.tv_sec - start.tv_sec < 20);
    return 0;
  });
  cr_expect_eq(end.signal, SIGXCPU, "exited=%d code=%d signal=%d", end.exited, end.code, end.signal);
}

Test(rlimits, refuses_bad_resources_and_soft_above_hard) {
  RlimitSet set;
  set.set(RLIMIT_NOFILE, 10, 5);
  cr_assert(!set.status().ok());
  expect_error_mentions(set.status().error(), "RLIMIT_NOFILE");
  expect_error_mentions(set.status().error(), "soft 10 above hard 5");
  cr_expect_null(set.find(RLIMIT_NOFILE), "a refused entry is not stored");
  set.set(RLIMIT_NOFILE, 1, 1).set(-1, 1, 1);
  expect_error_mentions(set.status().error(), "soft 10");  // the first error is kept

  RlimitSet range;
  range.set(RLIM_NLIMITS, 1);
  cr_assert(!range.status().ok());
  expect_error_mentions(range.status().error(), "resource 16");
  cr_assert(!check_rlimits_allowed(range).ok());
}

Test(rlimits, refuses_zero_and_huge_values_by_name) {
  Limits zero;
  zero.set(Limit::cpu_seconds, 0);
  auto z = rlimits_from_limits(zero);
  cr_assert(!z.ok());
  expect_error_mentions(z.error(), "cpu_seconds");
  Limits fsize0;
  fsize0.set(Limit::file_bytes, 0);  // meaningful: no file may grow
  cr_assert(rlimits_from_limits(fsize0).ok());
  Limits huge;
  huge.set(Limit::memory_bytes, ~0ULL);
  auto h = rlimits_from_limits(huge);
  cr_assert(!h.ok());
  expect_error_mentions(h.error(), "memory_bytes");
}

Test(rlimits, refuses_open_files_above_our_hard_limit) {
  if (has_effective_capability(CAP_SYS_RESOURCE))
    cr_skip_test("CAP_SYS_RESOURCE is effective: any hard limit up to nr_open can be raised");
  struct rlimit ours {};
  cr_assert_eq(getrlimit(RLIMIT_NOFILE, &ours), 0);
  Limits over;
  over.set(Limit::open_files, ours.rlim_max + 1);
  auto r = rlimits_from_limits(over);
  cr_assert(!r.ok());
  cr_expect_eq(r.error().code(), ERANGE);
  expect_error_mentions(r.error(), "open_files");
  expect_error_mentions(r.error(), "CAP_SYS_RESOURCE");
  Limits at;
  at.set(Limit::open_files, ours.rlim_max);
  cr_assert(rlimits_from_limits(at).ok());

  // The refusal is right: a child told to do it anyway gets EPERM.
  RlimitSet forced;
  forced.set(RLIMIT_NOFILE, ours.rlim_max + 1);
  cr_expect(!check_rlimits_allowed(forced).ok());
  ChildEnd end = run_in_child([&] { return apply_rlimits_in_child(forced); });
  cr_expect_eq(end.code, EPERM);
}

Test(rlimits, refuses_open_files_above_nr_open_even_with_capability) {
  std::uint64_t nr_open = std::stoull(corral_test::read_file("/proc/sys/fs/nr_open"));
  Limits over;
  over.set(Limit::open_files, nr_open + 1);
  auto r = rlimits_from_limits(over);
  cr_assert(!r.ok());
  expect_error_mentions(r.error(), "open_files");
  expect_error_mentions(r.error(), "nr_open");
}

Test(rlimits, a_lowered_hard_limit_is_checked_against) {
  // In a child whose own hard RLIMIT_NOFILE is 100, 100 is fine and 101 is
  // refused: the check follows the calling process, not the host's numbers.
  if (has_effective_capability(CAP_SYS_RESOURCE)) cr_skip_test("CAP_SYS_RESOURCE is effective");
  ChildEnd end = run_in_child([] {
    struct rlimit low {100, 100};
    if (setrlimit(RLIMIT_NOFILE, &low) != 0) return 2;
    Limits ok, over;
    ok.set(Limit::open_files, 100);
    over.set(Limit::open_files, 101);
    if (!rlimits_from_limits(ok).ok()) return 3;
    auto r = rlimits_from_limits(over);
    if (r.ok() || r.error().message().find("open_files=101") == std::string::npos) return 4;
    return 0;
  });
  cr_expect(end.exited && end.code == 0, "child exit %d signal %d", end.code, end.signal);
}
