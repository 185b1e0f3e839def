// A run's outputs through the supervisor: declared output names that are
// unusable or carry a secret, the artifact root, and what a library
// caller's on_output is given against the caps the Result keeps. The rest
// of a run's integration tests are run_test.cpp.
#include <filesystem>

#include "corral/json.hpp"
#include "corral/output_collect.hpp"
#include "corral/supervisor.hpp"
#include "support.hpp"
#include "supervisor_harness.hpp"

using namespace corral;
using corral_test::contains;
using corral_test::expect_text;
using corral_test::Harness;
using corral_test::req;
using corral_test::TempDir;
using corral_test::tree_of;

namespace {

std::string notes_of(const Result& res) {
  std::string notes;
  for (const auto& n : res.artifact_notes) notes += n + "\n";
  return notes;
}

}  // namespace

Test(run, one_bad_name_skips_that_file_and_the_others_are_copied) {
  Harness h;
  TempDir root;
  Request r = req(Tier::none, {"sh", "-c",
                               "echo good > zz.txt; echo b > 'a\\b.txt'; echo l > \"$(printf 'bad\\377.txt')\"; "
                               "echo c > \"$(printf 'ctl\\001.txt')\""});
  r.outputs = {"*"};
  r.artifact_root = root.path();
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  std::string notes = notes_of(res);
  cr_assert_eq(res.artifacts.size(), 1u, "listed %zu artifacts; notes: %s", res.artifacts.size(), notes.c_str());
  cr_assert_str_eq(res.artifacts[0].name.c_str(), "zz.txt");
  // Through a named copy: the assertion macro outlives a temporary's buffer.
  const std::string copied_text = corral_test::read_file(res.artifacts[0].path);
  cr_assert_str_eq(copied_text.c_str(), "good\n");
  // Each bad one has a note naming it (shown escaped) and why.
  cr_assert(contains(notes, "match 'a\\b.txt' contains a backslash; not delivered"), "%s", notes.c_str());
  cr_assert(contains(notes, "match 'bad\\xff.txt' is not valid UTF-8; not delivered"), "%s", notes.c_str());
  cr_assert(contains(notes, "match 'ctl\\x01.txt' contains a control character; not delivered"), "%s", notes.c_str());
  auto copied = tree_of(root / res.run_id);
  cr_assert(copied.size() == 1 && copied[0] == "zz.txt", "on disk: %zu entries", copied.size());
  cr_assert_eq(h.leftovers(), 0u);
}

Test(run, a_secret_in_a_file_name_is_masked_and_the_file_not_copied) {
  const std::string secret = "TopSecret123";
  setenv("CORRAL_TEST_NAME_TOKEN", secret.c_str(), 1);
  Harness h;
  TempDir root;
  Request r = req(Tier::none, {"sh", "-c", "echo s > \"$CORRAL_TEST_NAME_TOKEN.txt\"; echo p > plain.txt"});
  r.secrets.push_back(SecretRef{"CORRAL_TEST_NAME_TOKEN", "", {}});
  r.outputs = {"*"};
  r.artifact_root = root.path();
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  std::string json = result_to_json(res);
  cr_assert(!contains(json, secret), "the secret is in the JSON: %s", json.c_str());
  cr_assert(contains(notes_of(res), "***.txt: its name contains a secret"), "%s", json.c_str());
  cr_assert_eq(res.artifacts.size(), 1u, "%s", json.c_str());
  cr_assert_str_eq(res.artifacts[0].name.c_str(), "plain.txt");
  for (const auto& name : tree_of(root.path()))
    cr_assert(!contains(name, secret), "a file under the artifact root carries the secret: %s", name.c_str());
}

Test(run, a_bad_artifact_root_is_refused_before_the_program_runs) {
  Harness h;
  TempDir scratch;
  corral_test::write_file(scratch / "a-file", "x");
  const std::string marker = scratch / "ran";
  for (const auto& [root, why] : std::vector<std::pair<std::string, std::string>>{
           {scratch / "no-such-dir", "No such file or directory"}, {scratch / "a-file", "not a directory"}}) {
    Request r = req(Tier::none, {"touch", marker});
    r.outputs = {"*"};
    r.artifact_root = root;
    auto res = h.sup->run(std::move(r));
    cr_assert(!res.ok(), "a run with artifact root %s went ahead", root.c_str());
    const std::string& msg = res.error().message();
    cr_assert(contains(msg, root) && contains(msg, why), "%s", msg.c_str());
    cr_assert_eq(res.error().code(), EINVAL);
    cr_assert(access(marker.c_str(), F_OK) != 0, "the program ran");
  }
  cr_assert_eq(h.leftovers(), 0u);
}

Test(run, without_an_artifact_root_a_secret_named_file_is_listed_masked) {
  setenv("CORRAL_TEST_NAME_TOKEN", "TopSecret123", 1);
  Harness h;
  Request r = req(Tier::none, {"sh", "-c", "echo s > \"$CORRAL_TEST_NAME_TOKEN.txt\""});
  r.secrets.push_back(SecretRef{"CORRAL_TEST_NAME_TOKEN", "", {}});
  r.outputs = {"*"};
  Result res = h.run(std::move(r));
  std::string json = result_to_json(res);
  cr_assert(!contains(json, "TopSecret123"), "the secret is in the JSON: %s", json.c_str());
  cr_assert_eq(res.artifacts.size(), 1u, "%s", json.c_str());
  cr_assert_str_eq(res.artifacts[0].name.c_str(), "***.txt");
}

// A library caller's on_output is given what the Result keeps, never the
// bytes past the cap (it was given all 100,000 under stdout_bytes=10).
Test(run, on_output_stops_at_the_cap) {
  auto sup = Supervisor::create(SupervisorOptions{});
  cr_assert(sup.ok(), "%s", sup.ok() ? "" : sup.error().message().c_str());
  Request r;
  r.tier = Tier::none;
  r.argv = {"head", "-c", "100000", "/dev/zero"};
  r.limits.set(Limit::stdout_bytes, 10);
  std::size_t seen = 0;
  std::optional<Result> result;
  RunCallbacks cb;
  cb.on_output = [&](StreamId id, std::string_view data) {
    if (id == StreamId::stdout_stream) seen += data.size();
  };
  cb.on_result = [&](const Result& done) { result = done; };
  auto handle = (*sup)->submit(std::move(r), std::move(cb));
  cr_assert(handle.ok(), "%s", handle.ok() ? "" : handle.error().message().c_str());
  (void)(*sup)->run_until_idle();
  cr_assert(result.has_value());
  cr_assert_eq(result->stdout_capture.bytes, 100000u);
  cr_assert(result->stdout_capture.truncated);
  cr_assert_eq(seen, 10u, "on_output was given %zu bytes under stdout_bytes=10", seen);
}

// Compares through named copies (no pointer into a temporary reaches the
// assertion macro).

// Each stream on its own cap, a secret masked across the stdout cap, and a
// merged run: what on_output is given is exactly what the Result keeps,
// byte for byte, never past the cap; the Result (truncated, bytes) says
// what was cut.
Test(run, on_output_is_exactly_what_the_result_keeps_on_every_stream) {
  setenv("CORRAL_TEST_CAP_TOKEN", "S3cr3tValue", 1);
  Harness h;
  auto run = [&](bool merge) {
    Request r = req(Tier::none, {"sh", "-c",
                                 "printf 'abcdS3cr3tValue'; printf 'eeeeeeeeeeeeeeee' >&2; "
                                 "head -c 50000 /dev/zero; head -c 70000 /dev/zero >&2"});
    r.secrets.push_back(SecretRef{"CORRAL_TEST_CAP_TOKEN", "", {}});
    r.limits.set(Limit::stdout_bytes, 6);
    r.limits.set(Limit::stderr_bytes, 9);
    r.merge_output = merge;
    auto st = h.sup->stream(std::move(r));
    cr_assert(st.ok(), "%s", st.ok() ? "" : st.error().message().c_str());
    std::string seen[2];
    std::shared_ptr<Result> res;
    while (true) {
      auto ev = st->next();
      cr_assert(ev.ok());
      if (!ev->has_value()) break;
      if ((*ev)->kind == RunEvent::output)
        seen[(*ev)->stream == StreamId::stdout_stream ? 0 : 1] += (*ev)->data;
      else
        res = (*ev)->final;
    }
    cr_assert(res);
    cr_assert_eq(res->outcome, Outcome::exited, "%s", res->detail.c_str());
    return std::make_pair(std::move(res), std::pair{seen[0], seen[1]});
  };
  auto [split, split_seen] = run(false);
  expect_text(split_seen.first, "abcd**");  // "abcd***" cut at 6: the secret never shows
  expect_text(split->stdout_capture.text, "abcd**");
  cr_assert(split->stdout_capture.truncated);
  cr_assert_eq(split->stdout_capture.bytes, 15u + 50000u);
  expect_text(split_seen.second, "eeeeeeeee");
  expect_text(split->stderr_capture.text, "eeeeeeeee");
  cr_assert(split->stderr_capture.truncated);
  cr_assert_eq(split->stderr_capture.bytes, 16u + 70000u);

  auto [merged, merged_seen] = run(true);
  cr_assert_eq(merged_seen.first.size(), 6u, "merged: on_output was given %zu bytes under stdout_bytes=6",
               merged_seen.first.size());
  cr_assert(merged_seen.second.empty(), "merged: a stderr chunk was passed on");
  expect_text(merged_seen.first, merged->stdout_capture.text);
  cr_assert(merged->stdout_capture.truncated);
}

// Red team: a program nested 20,000 directories and declared `**/leaf.txt`;
// the output walk recursed once per level and overflowed the supervisor's
// stack (SIGSEGV: the whole batch gone). The walk now stops at
// WorkspaceOutputSource::kMaxWalkDepth levels with a note naming the cap;
// the same glob's shallow match and the run's other output still land, and
// the workspace is removed.
Test(run, a_20000_deep_tree_is_walked_to_the_depth_cap_and_the_rest_lands) {
  Harness h;
  TempDir root;
  // perl: a process of its own making 20,000 levels in well under a second
  // (perl-base is Essential on Debian); leaf.txt at level 1 and at the bottom.
  const std::string nest =
      "sub put { open(my $f, '>', $_[0]) or exit 3; print $f $_[1]; close $f or exit 3 }"
      "put('top.txt', 'top'); for my $i (1 .. $ARGV[0]) { mkdir 'a' or exit 4; chdir 'a' or exit 5;"
      " put('leaf.txt', 'shallow') if $i == 1 } put('leaf.txt', 'deep')";
  Request r = req(Tier::os_process, {"perl", "-e", nest, "20000"});
  r.outputs = {"**/leaf.txt", "top.txt"};
  r.artifact_root = root.path();
  Result res = h.run(std::move(r));
  cr_assert_eq(res.outcome, Outcome::exited, "%s", res.detail.c_str());
  cr_assert_eq(res.exit_code, 0, "the program could not build its tree: %s", res.stderr_capture.text.c_str());
  const std::string notes = notes_of(res);
  std::string names;
  for (const auto& a : res.artifacts) names += a.name + " ";
  cr_assert(names == "a/leaf.txt top.txt ", "artifacts: %s; notes: %s", names.c_str(), notes.c_str());
  const std::string shallow = corral_test::read_file(root / (res.run_id + "/a/leaf.txt"));
  cr_assert_str_eq(shallow.c_str(), "shallow");
  const std::string cap = "directories more than " + std::to_string(WorkspaceOutputSource::kMaxWalkDepth) +
                          " levels deep are not searched";
  cr_assert(contains(notes, cap) && contains(notes, "'**/leaf.txt'"), "%s", notes.c_str());
  // 20,000 directories are past what the loop removes itself: the rest goes
  // after the Result (Workspace::remove_or_hand_off), and close() waits for it.
  cr_assert(contains(res.detail, "the rest is removed after this result"), "%s", res.detail.c_str());
  h.sup->close();
  cr_assert_eq(h.leftovers(), 0u, "the 20,000-level workspace was left behind");
}
