#include "corral/audit.hpp"

#include <sys/stat.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "corral/json.hpp"
#include "corral/supervisor.hpp"
#include "support.hpp"
#include "supervisor_harness.hpp"

using namespace corral;
using nlohmann::json;

namespace {

const std::string kSecret = "hunter2-Zq9xT";

AuditRecord sample() {
  AuditRecord r;
  r.time = "2024-01-02T03:04:05.000Z";
  r.route = "grader";
  r.provenance = Provenance::untrusted;
  r.tier = "container";
  r.limits.set(Limit::cpu_seconds, 2).set(Limit::memory_bytes, 1 << 28);
  r.enforcement = {{"cpu_seconds", "hard"}, {"memory_bytes", "cgroup"}};
  r.outcome = "exited";
  r.run_id = "r-1-7";
  r.argv = {"grade", "--strict"};
  r.exit_code = 3;
  r.wall_seconds = 1.5;
  r.cpu_seconds = 0.25;
  r.timings = {{"plan", 0.001}, {"run", 1.25}};
  r.stdout_sha256 = std::string(64, 'a');
  r.stderr_sha256 = std::string(64, 'b');
  r.artifacts = {{"report.json", 42, std::string(64, 'c')}};
  return r;
}

std::size_t count(const std::string& text, std::string_view word) {
  std::size_t n = 0;
  for (auto at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

}  // namespace

Test(audit, one_json_line_with_every_field) {
  std::string line = audit_json_line(sample());
  cr_assert_eq(line.find('\n'), std::string::npos);
  json j = json::parse(line);
  cr_assert(j["route"] == "grader");
  cr_assert(j["provenance"] == "untrusted");
  cr_assert(j["tier"] == "container");
  cr_assert(j["limits"]["cpu_seconds"] == 2);
  cr_assert(j["limits"]["memory_bytes"] == 1 << 28);
  cr_assert(!j["limits"].contains("wall_seconds"));
  cr_assert(j["enforcement"]["memory_bytes"] == "cgroup");
  cr_assert(j["outcome"] == "exited");
  cr_assert(j["run_id"] == "r-1-7");
  cr_assert(j["argv"] == json::array({"grade", "--strict"}));
  cr_assert(j["exit_code"] == 3);
  cr_assert(j["signal"] == 0);
  cr_assert(j["wall_seconds"] == 1.5);
  cr_assert(j["cpu_seconds"] == 0.25);
  cr_assert(j["timings"]["run"] == 1.25);
  cr_assert(j["stdout_sha256"] == std::string(64, 'a'));
  cr_assert(j["artifacts"][0]["name"] == "report.json");
  cr_assert(j["artifacts"][0]["bytes"] == 42);
  cr_assert(j["time"] == "2024-01-02T03:04:05.000Z");
  // A stable field order, so lines diff well.
  cr_assert_lt(line.find("\"route\""), line.find("\"tier\""));
  cr_assert_lt(line.find("\"outcome\""), line.find("\"artifacts\""));
}

Test(audit, a_run_without_a_route_has_null_provenance) {
  AuditRecord r = sample();
  r.provenance.reset();
  json j = json::parse(audit_json_line(r));
  cr_assert(j["provenance"].is_null());
}

// The secret was leaked into every kind of string the record holds; the
// line must not contain it anywhere.
Test(audit, a_secret_value_never_reaches_the_line) {
  AuditRecord r = sample();
  r.outcome = "exited: token " + kSecret + " rejected";
  r.tier = kSecret;
  r.enforcement[kSecret] = "x" + kSecret + "x";
  r.timings["t_" + kSecret] = 1;
  r.artifacts.push_back({"out/" + kSecret + ".txt", 1, ""});
  MemoryAuditSink sink;
  std::vector<std::string> secrets{kSecret, ""};
  cr_assert(sink.record(r, secrets).ok());
  auto lines = sink.lines();
  cr_assert_eq(lines.size(), 1u);
  const std::string& line = lines[0];
  cr_assert_eq(line.find(kSecret), std::string::npos, "secret in: %s", line.c_str());
  cr_assert_eq(line.find("hunter2"), std::string::npos, "part of the secret in: %s", line.c_str());
  cr_assert_geq(count(line, "***"), 5u, "%s", line.c_str());
  json j = json::parse(line);
  cr_assert(j["outcome"] == "exited: token *** rejected");
  cr_assert(j["artifacts"][1]["name"] == "out/***.txt");
  // And without the secret list the test above could fail: the value was there.
  cr_assert_neq(audit_json_line(r).find(kSecret), std::string::npos);
}

Test(audit, overlapping_secrets_leave_no_tail) {
  std::vector<std::string> secrets{"abc", "bcd"};
  cr_assert(scrub_secrets("xabcdy", secrets) == "x***y");
  cr_assert(scrub_secrets("abcabc", secrets) == "******", "back to back: one mask each, as in the stream");
  cr_assert(scrub_secrets("nothing here", secrets) == "nothing here");
  std::vector<std::string> empty{""};
  cr_assert(scrub_secrets("text", empty) == "text");
}

// One masker: what the audit line and a result's detail say of a text is
// what the captured stream said of the same bytes. (The audit had a
// second implementation that merged back-to-back occurrences: "abcabc"
// was "***" in the audit line and "******" on stdout.)
Test(audit, scrub_secrets_is_the_stream_masker) {
  const std::vector<std::vector<std::string>> sets = {
      {"abc"}, {"abc", "bcd"}, {"aba", "ba"}, {"abcab", "cab", "b"}, {"aaaa", "aab", "ba"}, {"hunter2"}};
  const std::vector<std::string> texts = {"abcabc", "xabcdy", "abababa", "aaaaaab", "abcabcab",
                                          "token=hunter2hunter2!", "no secret", ""};
  for (const auto& secrets : sets)
    for (const auto& text : texts) {
      SecretMasker m(secrets);
      std::string streamed = m.feed(text);
      streamed += m.finish();
      std::string scrubbed = scrub_secrets(text, secrets);
      cr_assert_eq(scrubbed, streamed, "'%s' with %zu secret(s): scrub '%s', stream '%s'", text.c_str(),
                   secrets.size(), scrubbed.c_str(), streamed.c_str());
    }
}

Test(audit, bytes_that_are_not_utf8_do_not_break_the_line) {
  AuditRecord r = sample();
  r.artifacts = {{"bad\xff\xfe.bin", 1, ""}};
  std::string line = audit_json_line(r);
  json j = json::parse(line);
  cr_assert(j["artifacts"][0]["name"] == "bad\xef\xbf\xbd\xef\xbf\xbd.bin");
}

Test(audit, the_time_is_stamped_when_missing) {
  AuditRecord r = sample();
  r.time.clear();
  MemoryAuditSink sink;
  cr_assert(sink.record(r).ok());
  json j = json::parse(sink.lines().at(0));
  std::string time = j["time"];
  cr_assert_eq(time.size(), 24u, "%s", time.c_str());
  cr_assert_eq(time.back(), 'Z');
  cr_assert_eq(time[10], 'T');
}

Test(audit, file_sink_appends_private_lines_and_names_its_path_on_error) {
  corral_test::TempDir dir;
  std::string path = dir / "audit.jsonl";
  {
    auto sink = FileAuditSink::open(path);
    cr_assert(sink.ok(), "%s", sink.error().message().c_str());
    cr_assert(sink->record(sample()).ok());
  }
  auto again = FileAuditSink::open(path);
  cr_assert(again.ok());
  cr_assert(again->record(sample()).ok());
  std::string text = corral_test::read_file(path);
  cr_assert_eq(count(text, "\n"), 2u, "reopening truncated the file: %s", text.c_str());
  struct stat st;
  cr_assert_eq(stat(path.c_str(), &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0600u);

  auto bad = FileAuditSink::open(dir / "missing/audit.jsonl");
  cr_assert(!bad.ok());
  cr_assert(bad.error().message().find("audit: open '" + dir.path() + "/missing/audit.jsonl'") !=
                std::string::npos,
            "%s", bad.error().message().c_str());
}

// Several processes append long lines at once; every line must come out
// whole. A sink that wrote a line in pieces would interleave here.
Test(audit, lines_from_concurrent_processes_never_interleave) {
  corral_test::TempDir dir;
  std::string path = dir / "audit.jsonl";
  constexpr int kWriters = 4, kLines = 150;
  std::vector<pid_t> pids;
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = fork();
    if (pid == 0) {
      auto sink = FileAuditSink::open(path);
      if (!sink) _exit(1);
      AuditRecord r = sample();
      r.outcome = std::string(16384, static_cast<char>('a' + w));  // a 16 KiB line
      for (int i = 0; i < kLines; ++i) {
        r.route = "writer" + std::to_string(w) + "-" + std::to_string(i);
        if (!sink->record(r).ok()) _exit(2);
      }
      _exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer failed: %d", status);
  }
  std::istringstream in(corral_test::read_file(path));
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, false);
    cr_assert(!j.is_discarded(), "torn line %d (%zu bytes)", lines, line.size());
    std::string outcome = j["outcome"];
    cr_assert_eq(outcome.find_first_not_of(outcome[0]), std::string::npos, "mixed line");
    ++lines;
  }
  cr_assert_eq(lines, kWriters * kLines);
}

// A real run's line: tied to its run by run_id, argv (the secret in it
// masked, as in the output), exit code; its enforcement is the Result's
// (what this run had applied), and its timings carry the Result's names.
Test(audit, a_run_line_names_its_run_argv_exit_code_and_the_results_timings) {
  const std::string value = "s3cret-" + std::to_string(getpid());
  setenv("CORRAL_AUDIT_TEST_TOKEN", value.c_str(), 1);
  auto sink = std::make_shared<MemoryAuditSink>();
  SupervisorOptions o;
  o.audit = sink;
  corral_test::Harness h(o);
  Request r;
  r.tier = Tier::os_process;
  r.argv = {"sh", "-c", "echo \"$1\"; exit 3", "sh", "token=" + value};
  r.secrets.push_back(SecretRef{"TOKEN", "CORRAL_AUDIT_TEST_TOKEN"});
  Result res = h.run(r);
  cr_assert_eq(res.exit_code, 3, "%s", res.detail.c_str());
  cr_assert_str_eq(res.stdout_capture.text.c_str(), "token=***\n");

  auto lines = sink->lines();
  cr_assert_eq(lines.size(), 1u);
  cr_assert_eq(lines[0].find(value), std::string::npos, "secret in: %s", lines[0].c_str());
  json j = json::parse(lines[0]);
  cr_assert(j["run_id"] == res.run_id, "%s", lines[0].c_str());
  cr_assert(!res.run_id.empty());
  cr_assert(j["argv"] == json::array({"sh", "-c", "echo \"$1\"; exit 3", "sh", "token=***"}), "%s", j["argv"].dump().c_str());
  cr_assert(j["exit_code"] == 3);
  cr_assert(j["outcome"] == "exited");
  cr_assert(j["enforcement"] == json(res.enforcement));
  cr_assert(j["enforcement"]["write_confinement"] == "not_requested", "%s", j["enforcement"].dump().c_str());
  cr_assert(j["enforcement"]["secret_masking"] == "supervisor");

  json result = json::parse(result_to_json(res));
  std::vector<std::string> audit_keys, result_keys;
  for (auto& [k, v] : j["timings"].items()) audit_keys.push_back(k);
  for (auto& [k, v] : result["timings"].items()) result_keys.push_back(k);
  std::sort(audit_keys.begin(), audit_keys.end());
  std::sort(result_keys.begin(), result_keys.end());
  cr_assert(audit_keys == result_keys, "audit %s, result %s", j["timings"].dump().c_str(), result["timings"].dump().c_str());
  for (const char* phase : {"plan", "clone", "child_setup", "exec", "run", "collect"})
    cr_assert(result["timings"].contains(phase), "no %s in %s", phase, result["timings"].dump().c_str());
  cr_assert(j["wall_seconds"] == result["wall_seconds"]);
  cr_assert(j["cpu_seconds"] == result["cpu_seconds"]);
}

// A request that got no run has a line of the same shape: outcome error,
// the reason, what was asked, no run_id, nothing measured.
Test(audit, a_refusal_line_names_what_was_asked_and_why_and_measures_nothing) {
  Request asked;
  asked.id = "job-" + kSecret;
  asked.argv = {"grade", kSecret};
  asked.tier = Tier::none;
  asked.limits.set(Limit::wall_seconds, 5);
  Ask ask;
  ask.provenance = Provenance::untrusted;
  ask.route = "grader";
  std::string line = audit_json_line(audit_refusal("refused: " + kSecret, &asked, &ask, 7), std::vector{kSecret});
  cr_assert_eq(line.find(kSecret), std::string::npos, "%s", line.c_str());
  json j = json::parse(line);
  cr_assert(j["outcome"] == "error" && j["error"] == "refused: ***" && j["run_id"] == "", "%s", line.c_str());
  cr_assert(j["id"] == "job-***" && j["line"] == 7 && j["argv"] == json::array({"grade", "***"}), "%s", line.c_str());
  cr_assert(j["tier"] == "none" && j["route"] == "grader" && j["provenance"] == "untrusted", "%s", line.c_str());
  const json five_seconds = {{"wall_seconds", 5}};
  cr_assert(j["limits"] == five_seconds && j["enforcement"] == json::object(), "%s", line.c_str());
  cr_assert(j["exit_code"] == -1 && j["signal"] == 0 && j["artifacts"] == json::array(), "%s", line.c_str());
  for (const char* phase : {"plan", "clone", "child_setup", "exec", "run", "collect"})
    cr_assert(j["timings"].contains(phase) && j["timings"][phase].is_null(), "%s", line.c_str());
  // The same keys as a run's line, in the same order.
  json run = json::parse(audit_json_line(sample()));
  std::vector<std::string> keys, run_keys;
  for (auto& [k, v] : j.items()) keys.push_back(k);
  for (auto& [k, v] : run.items()) run_keys.push_back(k);
  cr_assert(keys == run_keys, "%s\n%s", line.c_str(), run.dump().c_str());
  cr_assert(run["error"].is_null() && run["line"].is_null());
  // Nothing read: no tier to name.
  json bare = json::parse(audit_json_line(audit_refusal("line 3 is not JSON", nullptr, nullptr, 3)));
  cr_assert(bare["tier"].is_null() && bare["id"] == "" && bare["argv"] == json::array(), "%s", bare.dump().c_str());
}

// On the old code Supervisor::run returned an error for an input that could
// not be staged: no Result, and no audit line.
Test(audit, a_run_whose_input_cannot_be_staged_is_a_spawn_failed_result_with_its_line) {
  auto sink = std::make_shared<MemoryAuditSink>();
  SupervisorOptions o;
  o.audit = sink;
  corral_test::Harness h(o);
  Request r;
  r.tier = Tier::os_process;
  r.argv = {"true"};
  Input in;
  in.name = "data.txt";
  in.host_path = "/nonexistent/corral-audit-input";
  r.inputs.push_back(in);
  auto res = h.sup->run(std::move(r));
  cr_assert(res.ok(), "no Result: %s", res.ok() ? "" : res.error().message().c_str());
  cr_assert_eq(res->outcome, Outcome::spawn_failed, "%s", res->detail.c_str());
  cr_assert_str_eq(res->spawn_stage.c_str(), "inputs");
  cr_assert_eq(res->spawn_errno, ENOENT);
  cr_assert(res->detail.find("'data.txt'") != std::string::npos, "%s", res->detail.c_str());
  cr_assert(res->detail.find("/nonexistent/corral-audit-input") != std::string::npos, "%s", res->detail.c_str());
  cr_assert(res->enforcement.empty(), "nothing ran, nothing was enforced");
  cr_assert_eq(h.leftovers(), 0u, "the workspace is removed");
  auto lines = sink->lines();
  cr_assert_eq(lines.size(), 1u);
  json j = json::parse(lines[0]);
  cr_assert(j["run_id"] == res->run_id && j["outcome"] == "spawn_failed", "%s", lines[0].c_str());
  cr_assert(j["error"].get<std::string>().find("data.txt") != std::string::npos, "%s", lines[0].c_str());
}

namespace {

// A sink whose disk is full: every append fails.
class FullAuditSink final : public AuditSink {
 protected:
  Status append_line(const std::string&) override { return Error(ENOSPC, "audit: append: no space left"); }
};

}  // namespace

// A library caller's refused submit() leaves a line. On the old code only
// the CLI and batch wrote one (each its own): a program holding a
// Supervisor with an audit sink could probe the gate with request after
// refused request, and the audit showed none of them.
Test(audit, every_refused_submit_of_a_library_caller_writes_a_line) {
  const std::string value = "s3cret-" + std::to_string(getpid());
  setenv("CORRAL_AUDIT_REFUSED_SET", value.c_str(), 1);
  unsetenv("CORRAL_AUDIT_REFUSED_UNSET");
  auto sink = std::make_shared<MemoryAuditSink>();
  SupervisorOptions o;
  o.audit = sink;
  corral_test::Harness h(o);

  // Refused while it is prepared: a secret that is not set. The one that
  // is set is masked where the request repeats it (its argv, its id).
  Request unset;
  unset.id = "probe-" + value;
  unset.tier = Tier::os_process;
  unset.argv = {"true", value};
  unset.limits.set(Limit::wall_seconds, 5);
  unset.secrets.push_back(SecretRef{"SET", "CORRAL_AUDIT_REFUSED_SET"});
  unset.secrets.push_back(SecretRef{"UNSET", "CORRAL_AUDIT_REFUSED_UNSET"});
  RunCallbacks cb;
  cb.audit_line = 12;
  auto refused = h.sup->submit(unset, cb);
  cr_assert(!refused.ok(), "an unset secret ran");
  // Refused before anything is prepared: no argv.
  Request empty;
  empty.id = "empty";
  empty.tier = Tier::none;
  cr_assert(!h.sup->submit(empty).ok(), "an empty argv ran");
  // And a run, for the count: one line per request.
  Request ok;
  ok.tier = Tier::none;
  ok.argv = {"true"};
  cr_assert_eq(h.run(ok).exit_code, 0);

  auto lines = sink->lines();
  cr_assert_eq(lines.size(), 3u, "one line per request, refused or run");
  for (const auto& line : lines) cr_assert_eq(line.find(value), std::string::npos, "secret in: %s", line.c_str());
  json a = json::parse(lines[0]);
  cr_assert(a["outcome"] == "error" && a["run_id"] == "" && a["line"] == 12, "%s", lines[0].c_str());
  const std::vector<std::string> secrets{value};
  cr_assert(a["error"] == scrub_secrets(refused.error().message(), secrets), "the Error's reason: %s", lines[0].c_str());
  cr_assert(a["error"].get<std::string>().find("CORRAL_AUDIT_REFUSED_UNSET") != std::string::npos, "%s",
            lines[0].c_str());
  cr_assert(a["id"] == "probe-***" && a["argv"] == json::array({"true", "***"}) && a["tier"] == "os_process", "%s",
            lines[0].c_str());
  cr_assert(a["limits"] == json({{"wall_seconds", 5}}), "%s", lines[0].c_str());
  json b = json::parse(lines[1]);
  cr_assert(b["outcome"] == "error" && b["id"] == "empty" && b["line"].is_null() && b["tier"] == "none", "%s",
            lines[1].c_str());
  cr_assert(json::parse(lines[2])["outcome"] == "exited", "%s", lines[2].c_str());
}

// An audit line that cannot be written is not lost silently: the refusal
// says so (there is no Result to carry a warning).
Test(audit, a_refusal_whose_line_cannot_be_written_says_so) {
  SupervisorOptions o;
  o.audit = std::make_shared<FullAuditSink>();
  corral_test::Harness h(o);
  Request empty;
  empty.tier = Tier::none;
  auto refused = h.sup->submit(empty);
  cr_assert(!refused.ok());
  const std::string why = refused.error().message();
  cr_assert(why.find("its audit line was not written") != std::string::npos && why.find("no space left") != std::string::npos,
            "%s", why.c_str());
}
