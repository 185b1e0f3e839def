// The one output collector (output_collect.hpp): `--output` globs and a
// route's declared outputs go through one transfer, with one set of rules.
// The workspace is filled as a hostile program would leave it (symlinks to
// host files, a hard link to one, a fifo, names no host may hold) and what
// comes out is checked on the host: artifacts, notes, files under the
// artifact root, and nothing written through a planted link.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "corral/output_collect.hpp"
#include "corral/sha256.hpp"
#include "support.hpp"
#include "supervisor_harness.hpp"

using namespace corral;
using corral_test::assert_mentions;
using corral_test::contains;
using corral_test::TempDir;
namespace fs = std::filesystem;

namespace {

Workspace make_ws(const TempDir& base) {
  WorkspaceOptions o;
  o.base_dir = base.path();
  auto ws = Workspace::create(o);
  cr_assert(ws.ok(), "%s", ws.error().message().c_str());
  return std::move(ws).value();
}

void put(const std::string& root, const std::string& rel, const std::string& data = "data") {
  fs::create_directories(fs::path(root + "/" + rel).parent_path());
  corral_test::write_file(root + "/" + rel, data);
}

// `corral run --output GLOB...`, optionally with an artifact root.
Request by_output(std::vector<std::string> globs, std::optional<std::string> root = std::nullopt) {
  Request r;
  r.argv = {"true"};
  r.outputs = std::move(globs);
  r.artifact_root = std::move(root);
  return r;
}

// A route's declared glob, consumed (no sink), under the route's caps.
Request by_route(std::string glob, TransferLimits caps = {}) {
  Request r;
  r.argv = {"true"};
  DeclaredOutput o;
  o.path = std::move(glob);
  o.media_type = "text/plain";
  o.disposition = Disposition::consume;
  r.declared_outputs = {o};
  r.output_caps = caps;
  return r;
}

Result collect(const Request& r, const Workspace& ws, const Limits& limits = default_limits(),
               std::string run_id = "run-1") {
  Result res;
  res.run_id = std::move(run_id);
  collect_run_outputs(r, limits, ws, res, nullptr);
  return res;
}

std::string names(const Result& r) {
  std::vector<std::string> v;
  for (const auto& a : r.artifacts) v.push_back(a.name);
  std::sort(v.begin(), v.end());
  std::string out;
  for (const auto& n : v) out += (out.empty() ? "" : " ") + n;
  return out;
}

std::string notes(const Result& r) {
  std::string out;
  for (const auto& n : r.artifact_notes) out += n + "\n";
  return out;
}

void expect_names(const Result& r, const std::string& want) {
  std::string got = names(r);
  cr_assert(got == want, "collected '%s', want '%s'; notes: %s", got.c_str(), want.c_str(), notes(r).c_str());
}

}  // namespace

// ---- never led out of the workspace -----------------------------------------

// A symlink to a host file and a hard link to one are never read, by
// --output or by a route: each is skipped with a note naming it, and the
// other files are delivered. (--output once had a walker of its own; a
// route's glob listed no symlink at all and said nothing.)
Test(output_collect, planted_links_are_never_followed_by_either_path) {
  TempDir base, host_dir;
  Workspace ws = make_ws(base);
  put(ws.path(), "out/ok.txt", "fine");
  cr_assert_eq(symlink("/etc/passwd", (ws.path() + "/out/leak.txt").c_str()), 0);
  cr_assert_eq(symlink("/etc", (ws.path() + "/out/etc").c_str()), 0);
  std::string host = host_dir / "host-secret";
  corral_test::write_file(host, "host secret");
  bool hard = link(host.c_str(), (ws.path() + "/out/hl.txt").c_str()) == 0;  // same filesystem only

  for (const Request& r : {by_output({"out/*", "out/**"}), by_route("out/**")}) {
    Result res = collect(r, ws);
    expect_names(res, "out/ok.txt");
    std::string n = notes(res);
    assert_mentions(n, {"'out/leak.txt' is a symlink; outputs follow none", "'out/etc' is a symlink"});
    if (hard) assert_mentions(n, {"'out/hl.txt' is a hard link (st_nlink=2)"});
    for (const auto& a : res.artifacts) cr_assert(a.sha256 == Sha256::hex_of("fine"), "%s was read", a.name.c_str());
  }
}

Test(output_collect, a_fifo_is_skipped_without_blocking, .timeout = 10) {
  TempDir base;
  Workspace ws = make_ws(base);
  put(ws.path(), "out/a.txt", "a");
  cr_assert_eq(mkfifo((ws.path() + "/out/pipe").c_str(), 0666), 0);
  Result res = collect(by_output({"out/*"}), ws);
  expect_names(res, "out/a.txt");
  assert_mentions(notes(res), {"the size of 'out/pipe' cannot be known", "; not delivered"});
}

// One bad name does not cancel the rest: each file stands alone.
Test(output_collect, names_no_host_may_hold_are_skipped_one_by_one) {
  TempDir base;
  Workspace ws = make_ws(base);
  const std::string backslash = "a\\b.txt", latin1 = "bad\xff.txt", control = "ctl\x01.txt";
  for (const auto& name : {std::string("zz.txt"), backslash, latin1, control}) put(ws.path(), name, name);
  Result res = collect(by_output({"*"}), ws);
  expect_names(res, "zz.txt");
  assert_mentions(notes(res), {"backslash", "UTF-8", "control character"});
}

// ---- the caps: --output obeys a route's rules ----------------------------------

// A file over artifact_bytes refuses the transfer, as a file over a
// route's max_bytes_per_file does: nothing is delivered, one note names the
// file and the cap. (--output used to skip that file alone and deliver the
// rest.) The same for the total and the count.
Test(output_collect, a_cap_refuses_the_transfer_for_output_globs_as_for_a_route) {
  TempDir base, root;
  Workspace ws = make_ws(base);
  put(ws.path(), "big.bin", std::string(2000, 'b'));
  put(ws.path(), "small.txt", "s");
  for (int i = 0; i < 4; ++i) put(ws.path(), "logs/" + std::to_string(i) + ".log", std::string(400, 'l'));

  Limits per_file = default_limits();
  per_file.set(Limit::artifact_bytes, 1000);
  Result big = collect(by_output({"*"}, root.path()), ws, per_file, "per-file");
  expect_names(big, "");
  assert_mentions(notes(big), {"outputs refused (cap_exceeded)", "'big.bin' has 2000 bytes, over max_bytes_per_file (1000)"});
  cr_assert(!fs::exists(root / "per-file"), "a refused transfer leaves no run directory");

  Limits total = default_limits();
  total.set(Limit::artifact_total_bytes, 1000);
  Result sum = collect(by_output({"logs/*"}), ws, total);
  expect_names(sum, "");
  assert_mentions(notes(sum), {"outputs refused (cap_exceeded)", "over max_total_bytes (1000)"});

  Limits count = default_limits();
  count.set(Limit::artifact_count, 3);
  Result many = collect(by_output({"logs/*"}), ws, count);
  expect_names(many, "");
  assert_mentions(notes(many), {"outputs refused (cap_exceeded)", "exceed max_files (3)"});

  // Under the caps, everything is delivered.
  expect_names(collect(by_output({"logs/*", "small.txt"}), ws), "logs/0.log logs/1.log logs/2.log logs/3.log small.txt");
}

// The stricter of a route's transfer caps and the run's artifact_* limits.
Test(output_collect, the_stricter_cap_wins) {
  Request r = by_route("*", TransferLimits{100, 1000, 5});
  Limits l = default_limits();
  l.set(Limit::artifact_bytes, 50).set(Limit::artifact_count, 10);
  TransferLimits caps = output_caps_for(r, l);
  cr_assert_eq(caps.max_bytes_per_file, 50u);
  cr_assert_eq(caps.max_total_bytes, 1000u);
  cr_assert_eq(caps.max_files, 5u);
  Request plain = by_output({"*"});
  Limits none;
  TransferLimits unbounded = output_caps_for(plain, none);
  cr_assert_eq(unbounded.max_files, UINT64_MAX);
}

// ---- the glob dialect --------------------------------------------------------

Test(output_collect, glob_matching_rules) {
  TempDir base;
  Workspace ws = make_ws(base);
  for (const char* f : {"a.txt", "b.log", ".hidden.txt", "sub/c.txt", "sub/deep/d.txt", "home/h.txt", "tmp/t.txt"})
    put(ws.path(), f, f);
  auto got = [&](std::vector<std::string> globs) { return collect(by_output(std::move(globs)), ws); };
  expect_names(got({"*.txt"}), ".hidden.txt a.txt");  // '*' does not cross '/'
  expect_names(got({"**/*.txt"}), ".hidden.txt a.txt sub/c.txt sub/deep/d.txt");  // nor into home/, tmp/
  expect_names(got({"sub/**"}), "sub/c.txt sub/deep/d.txt");
  expect_names(got({"s?b/[cd].txt"}), "sub/c.txt");
  expect_names(got({"sub/**/d.txt"}), "sub/deep/d.txt");
  expect_names(got({"home/*.txt", "tmp/**"}), "home/h.txt tmp/t.txt");
  Result once = got({"*.txt", "a.*", "a.txt"});  // each path once, and no note for it
  expect_names(once, ".hidden.txt a.txt");
  cr_assert(once.artifact_notes.empty(), "%s", notes(once).c_str());
  expect_names(got({"nothing/*"}), "");

  Result one = got({"a.txt"});
  cr_assert_eq(one.artifacts.at(0).bytes, 5u);
  cr_assert(one.artifacts[0].sha256 == Sha256::hex_of("a.txt"));
  cr_assert(one.artifacts[0].path.empty(), "no artifact root: listed, not kept");

  for (const char* bad : {"", "/etc/*", "out/../../etc/passwd"}) {
    Result refused = got({bad});
    expect_names(refused, "");
    assert_mentions(notes(refused), {"outputs refused (invalid_name)"});
  }
}

Test(output_collect, the_walk_stops_at_its_entry_budget) {
  TempDir base;
  Workspace ws = make_ws(base);
  for (int i = 0; i < 20; ++i) put(ws.path(), "f" + std::to_string(i));
  WorkspaceOutputSource source(ws, 5);
  auto listed = source.list("*");
  cr_assert(!listed.ok(), "20 entries listed under a budget of 5");
  assert_mentions(listed.error().message(), {"more than 5 directory entries walked"});
}

// ---- the artifact root ---------------------------------------------------------

// <artifact_root>/<run_id> is made fresh: one planted there (a symlink
// elsewhere, or a directory holding one) is never written through.
Test(output_collect, lands_in_a_fresh_run_directory_and_never_through_a_planted_link) {
  TempDir base, root, elsewhere;
  Workspace ws = make_ws(base);
  put(ws.path(), "out/r.txt", "result");
  put(ws.path(), "out/deep/s.txt", "second");
  Result one = collect(by_output({"out/**"}, root.path()), ws, default_limits(), "run-1");
  expect_names(one, "out/deep/s.txt out/r.txt");
  cr_assert_eq(corral_test::read_file(root / "run-1/out/r.txt"), "result");
  cr_assert_eq(corral_test::read_file(root / "run-1/out/deep/s.txt"), "second");
  for (const auto& a : one.artifacts) cr_assert(a.path == root / ("run-1/" + a.name), "%s", a.path.c_str());

  cr_assert_eq(symlink(elsewhere.path().c_str(), (root / "run-2").c_str()), 0);
  Result two = collect(by_output({"out/**"}, root.path()), ws, default_limits(), "run-2");
  expect_names(two, "");
  assert_mentions(notes(two), {"run-2'", "File exists"});
  fs::create_directories(root / "run-3");
  cr_assert_eq(symlink(elsewhere.path().c_str(), (root / "run-3/out").c_str()), 0);
  Result three = collect(by_output({"out/**"}, root.path()), ws, default_limits(), "run-3");
  expect_names(three, "");
  cr_assert(fs::is_empty(elsewhere.path()), "something was written through a symlink");
}

// ---- through a real run ------------------------------------------------------------

// What a program leaves: a symlink to a host file and a file over the cap.
// The run's Result says so in notes; the host file is never in an artifact.
Test(output_collect, a_real_run_with_planted_links_and_an_oversized_file) {
  corral_test::Harness h;
  TempDir root;
  Request r;
  r.tier = Tier::none;
  r.argv = {"sh", "-c", "echo ok > ok.txt; ln -s /etc/passwd leak.txt; head -c 3000 /dev/zero > big.txt"};
  r.outputs = {"*.txt"};
  r.artifact_root = root.path();
  r.limits.set(Limit::artifact_bytes, 1000);
  Result small = h.run(r);
  assert_mentions(notes(small), {"outputs refused (cap_exceeded)", "'big.txt' has 3000 bytes"});
  cr_assert(small.artifacts.empty());

  r.limits.set(Limit::artifact_bytes, 4000);
  Result fits = h.run(r);
  cr_assert_eq(names(fits), "big.txt ok.txt", "%s", notes(fits).c_str());
  assert_mentions(notes(fits), {"outputs: output '*.txt': 'leak.txt' is a symlink; outputs follow none; not delivered"});
  cr_assert_eq(corral_test::read_file(root / (fits.run_id + "/ok.txt")), "ok\n");
  cr_assert(!fs::exists(fs::symlink_status(root / (fits.run_id + "/leak.txt"))));
}
