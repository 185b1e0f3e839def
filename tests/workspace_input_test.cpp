// Inputs from host paths (Workspace::stage_path) under the caps of outputs:
// a single file obeys them as a directory's files do, a file that grows while
// it is copied (or says 0 bytes and reads on) stops at the cap, and a FIFO or
// device is refused without a read, never copied without end.
#include "corral/workspace.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <initializer_list>

#include "support.hpp"

using namespace corral;
namespace fs = std::filesystem;

namespace {

Workspace make_ws(const corral_test::TempDir& base) {
  WorkspaceOptions o;
  o.base_dir = base.path();
  auto ws = Workspace::create(o);
  cr_assert(ws.ok(), "%s", ws.error().message().c_str());
  return std::move(ws).value();
}

Workspace::TreeCaps caps(std::uint64_t file_bytes, std::uint64_t total_bytes = UINT64_MAX) {
  Workspace::TreeCaps c;
  c.file_bytes = file_bytes;
  c.total_bytes = total_bytes;
  return c;
}

void expect_refused(const Status& st, std::initializer_list<const char*> fragments) {
  cr_assert(!st.ok(), "expected a refusal mentioning '%s'", *fragments.begin());
  const std::string& msg = st.error().message();
  for (const char* f : fragments) cr_assert(msg.find(f) != std::string::npos, "'%s' not in: %s", f, msg.c_str());
}

bool exists_nofollow(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace

// A single file was copied whatever its size (only a directory's files had
// the caps): `--input big.iso` filled the workspace's disk before the run.
Test(workspace_input, a_single_file_over_artifact_bytes_is_refused_naming_the_input_and_the_cap) {
  corral_test::TempDir base, host;
  Workspace ws = make_ws(base);
  std::string big = host / "big.bin";
  corral_test::write_file(big, std::string(5000, 'x'));
  std::vector<std::string> skipped;
  expect_refused(ws.stage_path(big, "in/big.bin", false, caps(1000), skipped),
                 {"input 'in/big.bin'", big.c_str(), "5000 bytes", "artifact_bytes=1000", "caps of outputs"});
  cr_assert(!exists_nofollow(ws.path() + "/in/big.bin"), "a refused input was left in the workspace");
  expect_refused(ws.stage_path(big, "big2", false, caps(UINT64_MAX, 4000), skipped),
                 {"input 'big2'", "artifact_total_bytes=4000"});
  // At the cap it is copied whole.
  Status fits = ws.stage_path(big, "fits", false, caps(5000, 5000), skipped);
  cr_assert(fits.ok(), "%s", fits.error().message().c_str());
  cr_assert_eq(fs::file_size(ws.path() + "/fits"), 5000u);
}

// /proc/kallsyms says 0 bytes and reads megabytes: a file whose size before
// the copy is no bound on what the copy reads, like one that grows while it
// is copied. The copy stops one byte past the cap and the input is refused.
Test(workspace_input, a_file_that_reads_past_its_size_stops_at_the_cap, .timeout = 30) {
  struct stat st {};
  if (::stat("/proc/kallsyms", &st) != 0 || st.st_size != 0) cr_skip_test("no /proc/kallsyms of size 0 here");
  corral_test::TempDir base;
  Workspace ws = make_ws(base);
  std::vector<std::string> skipped;
  expect_refused(ws.stage_path("/proc/kallsyms", "syms", false, caps(4096), skipped),
                 {"input 'syms'", "grew past artifact_bytes=4096", "while it was copied"});
  cr_assert(!exists_nofollow(ws.path() + "/syms"), "a refused input was left in the workspace");
  // In a directory the same: the total cap binds when it is the smaller.
  expect_refused(ws.stage_path("/proc/kallsyms", "syms", false, caps(1 << 20, 8192), skipped),
                 {"input 'syms'", "artifact_total_bytes=8192"});
}

// A writer appends to the file while it is staged: the copy ends at the cap
// at the latest, whatever the writer does (the file is big enough before the
// copy that it only grows past the cap, never finishes under it).
Test(workspace_input, a_file_growing_while_it_is_copied_ends_at_the_cap, .timeout = 60) {
  corral_test::TempDir base, host;
  Workspace ws = make_ws(base);
  std::string grows = host / "grows.log";
  corral_test::write_file(grows, std::string(1 << 20, 'a'));
  pid_t writer = fork();
  cr_assert_geq(writer, 0);
  if (writer == 0) {
    int fd = ::open(grows.c_str(), O_WRONLY | O_APPEND);
    std::string chunk(1 << 16, 'b');
    for (int i = 0; i < 1024; ++i)  // 64 MiB at most, whatever happens to the test
      if (::write(fd, chunk.data(), chunk.size()) < 0) _exit(1);
    _exit(0);
  }
  // Wait until the writer made it longer than the cap.
  while (fs::file_size(grows) <= (2u << 20)) ::usleep(100);
  std::vector<std::string> skipped;
  // Its size is over the cap by now: refused before any copy, or while the
  // copy ran past the cap; never copied on.
  Status st = ws.stage_path(grows, "grows.log", false, caps(2u << 20), skipped);
  ::kill(writer, SIGKILL);
  ::waitpid(writer, nullptr, 0);
  expect_refused(st, {"input 'grows.log'", "artifact_bytes=2097152"});
  cr_assert(!exists_nofollow(ws.path() + "/grows.log"));
}

// Neither a FIFO nor a device is opened blocking or read: refused by what it is.
Test(workspace_input, a_fifo_or_a_device_input_is_refused_not_read, .timeout = 10) {
  corral_test::TempDir base, host;
  Workspace ws = make_ws(base);
  std::string fifo = host / "fifo";
  cr_assert_eq(::mkfifo(fifo.c_str(), 0600), 0);
  std::vector<std::string> skipped;
  expect_refused(ws.stage_path(fifo, "in", false, caps(4096), skipped),
                 {"input 'in'", "neither a regular file nor a directory (fifo)"});
  expect_refused(ws.stage_path("/dev/zero", "zero", false, caps(UINT64_MAX), skipped),
                 {"input 'zero'", "neither a regular file nor a directory (char"});
  cr_assert(!exists_nofollow(ws.path() + "/in") && !exists_nofollow(ws.path() + "/zero"));
}
