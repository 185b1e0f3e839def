// corral's own memory stays bounded whatever a run produces: measured from
// outside, as the peak RSS (wait4's ru_maxrss) of a `corral` CLI process,
// against a bound far below what the old code took. The programs run here
// use almost no memory themselves (a sparse file, a pipe of NULs), so the
// peak is corral's.
//   - declared outputs are streamed (collected and landed a buffer at a
//     time): a 1 GiB artifact cost ~1 GiB when it was read whole;
//   - `--json` writes a Result's streams as it escapes them: a stdout of
//     NULs (6 bytes each as \u0000) cost ~13x the capture cap.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "corral/capture.hpp"
#include "corral/json.hpp"
#include "corral/sha256.hpp"
#include "cli_runner.hpp"
#include "support.hpp"

using namespace corral_test;
using json = nlohmann::json;

namespace {

using Measured = CliRun;

// `corral ARGS...`; its peak RSS (max_rss_kb) from wait4.
Measured run_corral(const std::vector<std::string>& args) { return run_cli(args); }

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

// ---- --json of a Result

namespace {

// `corral run --json` of a program that writes the stdout cap's worth (16
// MiB by default) of `byte`; the Result's stdout must be `each` per byte.
void expect_json_in_bounded_memory(const std::string& tr, const std::string& each) {
  const std::size_t cap = 16u << 20;
  Measured m = run_corral({"run", "--json", "--tier", "none", "--", "sh", "-c",
                       "head -c " + std::to_string(cap) + " /dev/zero" + tr});
  cr_assert_eq(m.code, 0, "exit %d: %s", m.code, m.err.c_str());
  json j = json::parse(m.out);
  std::string got = j["stdout"];
  cr_assert_eq(got.size(), cap * each.size());
  cr_assert_eq(got.compare(0, each.size(), each), 0);
  cr_assert_eq(got.compare(got.size() - each.size(), each.size(), each), 0);
  cr_assert_eq(j["stdout_bytes"], cap);
  // The capture holds the cap (16 MiB); the JSON is written as it is made.
  cr_assert_lt(m.max_rss_kb, 64 * kMiB, "corral peaked at %ld KiB writing %zu bytes of JSON", m.max_rss_kb,
               m.out.size());
}

}  // namespace

// Each NUL is 6 bytes of JSON (\u0000): 96 MiB of text, built whole and
// copied before (~13x the cap: 210 MB of RSS).
Test(memory_bounds, json_of_a_stdout_of_nul_bytes_is_written_in_bounded_memory) {
  expect_json_in_bounded_memory("", std::string(1, '\0'));
}

// Each invalid byte is U+FFFD (3 bytes).
Test(memory_bounds, json_of_a_stdout_of_invalid_utf8_is_written_in_bounded_memory) {
  expect_json_in_bounded_memory(" | tr '\\0' '\\377'", "\xEF\xBF\xBD");
}

// A batch result line the same: made as the ring writes it.
Test(memory_bounds, a_batch_result_line_of_nul_bytes_is_written_in_bounded_memory) {
  TempDir dir;
  write_file(dir / "jobs",
             R"({"id":"nul","tier":"none","argv":["head","-c","16777216","/dev/zero"]})" "\n"
             R"({"id":"bad","tier":"none","argv":["sh","-c","head -c 16777216 /dev/zero | tr '\\0' '\\377'"]})" "\n");
  Measured m = run_corral({"batch", "--parallel", "1", dir / "jobs"});
  cr_assert_eq(m.code, 0, "exit %d: %s", m.code, m.err.c_str());
  std::istringstream lines(m.out);
  std::size_t n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    json j = json::parse(line);
    cr_assert_eq(j["outcome"], "exited", "%s", j["detail"].dump().c_str());
    cr_assert_eq(j["stdout"].get<std::string>().size(), j["id"] == "nul" ? 16u << 20 : 48u << 20);
  }
  cr_assert_eq(n, 2u);
  cr_assert_lt(m.max_rss_kb, 96 * kMiB, "corral batch peaked at %ld KiB", m.max_rss_kb);
}

// The parts joined are the text a whole conversion makes: characters and
// ill-formed sequences across the 64 KiB part edges, stdout and stderr,
// with and without base64.
Test(memory_bounds, result_json_parts_are_the_whole_text) {
  std::string text;
  const std::string pieces[] = {"\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xE2\x82", "\x80\x80\x80\x80", "\xC3",
                                "\xFF", "a", std::string(1, '\0'), "\"\\\n"};
  // Each piece starting 0-3 bytes before a multiple of 64 KiB (a part edge).
  std::size_t edge = 0;
  for (const auto& p : pieces)
    for (std::size_t before = 0; before < 4; ++before) {
      ++edge;
      text.append(65536 * edge - before - text.size(), 'x');
      text += p;
    }
  corral::Result r;
  r.stdout_capture.text = text;
  r.stderr_capture.text = text.substr(7);
  for (bool binary : {false, true}) {
    r.binary_output = binary;
    corral::ResultJson made(r, 3);
    std::string joined;
    std::size_t parts = 0;
    for (std::string part = made.next(); !part.empty(); part = made.next(), ++parts) joined += part;
    cr_assert_gt(parts, 8u);
    cr_assert_eq(joined.size(), made.size());
    json j = json::parse(joined);
    cr_assert(j["stdout"] == corral::to_utf8_lossy(text));
    cr_assert(j["stderr"] == corral::to_utf8_lossy(text.substr(7)));
    cr_assert_eq(j["line"], 3);
    if (binary) cr_assert(j["stdout_b64"] == corral::base64_encode(text));
    cr_assert_eq(joined, corral::result_to_json(r, 3));
  }
}
