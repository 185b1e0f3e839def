// corral's own memory stays bounded whatever a run produces: measured from
// outside, as the peak RSS (wait4's ru_maxrss) of a `corral` CLI process,
// against a bound far below what the old code took. The programs run here
// use almost no memory themselves (a sparse file, a pipe of NULs), so the
// peak is corral's.
//   - declared outputs are streamed (collected and landed a buffer at a
//     time): a 1 GiB artifact cost ~1 GiB when it was read whole.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "corral/sha256.hpp"
#include "support.hpp"

using namespace corral_test;
using json = nlohmann::json;

namespace {

struct Measured {
  int code = -1;
  long max_rss_kb = 0;  // of the corral process (and the program it ran)
  std::string out, err;
};

// `corral ARGS...` with stdout and stderr to files; its peak RSS from wait4.
Measured run_corral(const std::vector<std::string>& args) {
  TempDir capture;
  std::string out_path = capture / "out", err_path = capture / "err";
  std::string bin = build_dir() + "/bin/corral";
  pid_t pid = fork();
  if (pid == 0) {
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(126);
    std::vector<char*> argv{bin.data()};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  Measured m;
  int status = 0;
  struct rusage ru {};
  cr_assert_eq(wait4(pid, &status, 0, &ru), pid);
  m.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  m.max_rss_kb = ru.ru_maxrss;
  m.out = read_file(out_path);
  m.err = read_file(err_path);
  return m;
}

std::string zeros_sha256(std::uint64_t bytes) {
  corral::Sha256 h;
  std::string chunk(1 << 20, '\0');
  for (std::uint64_t done = 0; done < bytes; done += chunk.size()) h.update(chunk);
  return h.hex_digest();
}

constexpr long kMiB = 1024;  // in ru_maxrss's KiB

}  // namespace

TestSuite(memory_bounds, .timeout = 300);

// ---- declared outputs

// `--output` without an artifact root lists the file with its size and
// SHA-256 (consumed): read whole into memory before, ~1 GiB of RSS for a
// 1 GiB sparse file the program made in no time.
Test(memory_bounds, a_1_gib_artifact_is_hashed_in_bounded_memory) {
  const std::uint64_t size = 1ull << 30;
  Measured m = run_corral({"run", "--json", "--tier", "none", "-l", "artifact_bytes=2GiB", "-l",
                       "artifact_total_bytes=2GiB", "--output", "big.bin", "--", "truncate", "-s", "1G", "big.bin"});
  cr_assert_eq(m.code, 0, "exit %d: %s %s", m.code, m.out.c_str(), m.err.c_str());
  json j = json::parse(m.out);
  cr_assert_eq(j["artifacts"].size(), 1u, "%s", m.out.c_str());
  cr_assert_eq(j["artifacts"][0]["bytes"], size);
  cr_assert_eq(j["artifacts"][0]["sha256"], zeros_sha256(size));
  cr_assert_lt(m.max_rss_kb, 64 * kMiB, "corral peaked at %ld KiB collecting a 1 GiB artifact", m.max_rss_kb);
}

// With an artifact root the file lands (a temporary file in DIR/<run-id>/,
// renamed at the end): the same bytes, the same bound.
Test(memory_bounds, a_256_mib_artifact_lands_in_bounded_memory) {
  const std::uint64_t size = 256ull << 20;
  TempDir root;
  Measured m = run_corral({"run", "--json", "--tier", "none", "-l", "artifact_bytes=1GiB", "-l",
                       "artifact_total_bytes=1GiB", "--output", "big.bin", "--artifact-root", root.path(), "--",
                       "truncate", "-s", "256M", "big.bin"});
  cr_assert_eq(m.code, 0, "exit %d: %s %s", m.code, m.out.c_str(), m.err.c_str());
  json j = json::parse(m.out);
  cr_assert_eq(j["artifacts"].size(), 1u, "%s", m.out.c_str());
  std::string landed = j["artifacts"][0]["path"];
  struct stat st {};
  cr_assert_eq(::stat(landed.c_str(), &st), 0, "%s", landed.c_str());
  cr_assert_eq(static_cast<std::uint64_t>(st.st_size), size);
  cr_assert_eq(j["artifacts"][0]["sha256"], zeros_sha256(size));
  // Nothing but the artifact in the run's directory: no temporary file left.
  std::string dir = landed.substr(0, landed.rfind('/'));
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename());
  cr_assert(names == std::vector<std::string>{"big.bin"}, "%zu entries in %s", names.size(), dir.c_str());
  cr_assert_lt(m.max_rss_kb, 64 * kMiB, "corral peaked at %ld KiB landing a 256 MiB artifact", m.max_rss_kb);
}

