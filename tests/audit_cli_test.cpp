// Every request in the audit log, refused or not, and never a secret:
// `corral run` and `corral batch` through the real binary, their result
// lines and the audit lines they wrote parsed back.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "support.hpp"

using corral_test::CliRun;
using corral_test::read_file;
using corral_test::run_cli;
using corral_test::TempDir;
using corral_test::write_file;
using nlohmann::json;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<json> json_lines(const std::string& text) {
  std::vector<json> v;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, false);
    cr_assert(!j.is_discarded(), "not a JSON line: %s", line.c_str());
    v.push_back(std::move(j));
  }
  return v;
}

// The line whose key `key` is `value` (a null json when none is).
json with(const std::vector<json>& lines, const char* key, const json& value) {
  for (const auto& j : lines)
    if (j.contains(key) && j[key] == value) return j;
  return json();
}

std::string str(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

// A refusal's audit line: no run, the reason, nothing measured.
void expect_refusal_line(const json& a, const std::string& reason_part, const std::string& all) {
  cr_assert(a.is_object(), "no audit line for it in: %s", all.c_str());
  cr_expect(a["outcome"] == "error", "%s", a.dump().c_str());
  cr_expect(a["run_id"] == "", "%s", a.dump().c_str());
  cr_expect(contains(str(a, "error"), reason_part), "the reason does not say '%s': %s", reason_part.c_str(),
            a.dump().c_str());
  cr_expect(a["timings"]["plan"].is_null() && a["timings"]["run"].is_null(), "%s", a.dump().c_str());
  cr_expect(a["schema_version"] == 1 && a.contains("time") && a.contains("artifacts"), "%s", a.dump().c_str());
}

}  // namespace

TestSuite(audit_cli, .timeout = 120);

// On the old code a refused job line, a malformed one and a refused
// `corral run` left the audit log as it was: an operator saw only the runs.
Test(audit_cli, a_refused_job_a_malformed_line_and_a_refused_run_each_write_an_audit_line) {
  TempDir dir;
  const std::string jobs = dir / "jobs.jsonl", audit = dir / "audit.jsonl";
  write_file(jobs,
             "{\"id\": \"ok\", \"argv\": [\"true\"], \"tier\": \"none\"}\n"
             "{\"id\": \"gate\", \"argv\": [\"true\"], \"tier\": \"none\", \"provenance\": \"untrusted\"}\n"
             "not json\n"
             "{\"id\": \"bogus\", \"argv\": [\"true\"], \"bogus\": 1}\n"
             "{\"id\": \"hostpath\", \"argv\": [\"true\"], \"tier\": \"none\", "
             "\"inputs\": [{\"name\": \"x\", \"host_path\": \"/etc/hostname\"}]}\n"
             "{\"id\": \"unset\", \"argv\": [\"true\"], \"tier\": \"none\", \"secret_env\": [\"CORRAL_AUDIT_CLI_UNSET\"]}\n");
  CliRun b = run_cli({"batch", "--audit", audit, jobs});
  cr_assert_eq(b.code, 0, "exit %d: %s", b.code, b.err.c_str());
  cr_assert_eq(json_lines(b.out).size(), 6u, "%s", b.out.c_str());
  const std::string text = read_file(audit);
  auto lines = json_lines(text);
  cr_assert_eq(lines.size(), 6u, "one audit line per job line, refused or not:\n%s", text.c_str());

  json ran = with(lines, "id", "ok");
  cr_assert(ran["outcome"] == "exited" && ran["line"].is_null() && ran["error"].is_null(), "%s", ran.dump().c_str());
  json gate = with(lines, "line", 2);
  expect_refusal_line(gate, "provenance untrusted needs tier container", text);
  cr_expect(gate["id"] == "gate" && gate["argv"] == json::array({"true"}) && gate["tier"] == "none" &&
                gate["provenance"] == "untrusted",
            "what was asked: %s", gate.dump().c_str());
  json malformed = with(lines, "line", 3);
  expect_refusal_line(malformed, "not valid JSON", text);
  cr_expect(malformed["id"] == "" && malformed["tier"].is_null() && malformed["argv"] == json::array(),
            "%s", malformed.dump().c_str());
  json bogus = with(lines, "line", 4);
  expect_refusal_line(bogus, "unknown field 'bogus'", text);
  cr_expect(bogus["id"] == "bogus" && bogus["argv"] == json::array({"true"}), "as far as it reads: %s",
            bogus.dump().c_str());
  expect_refusal_line(with(lines, "line", 5), "host paths are not allowed here", text);
  // Refused by the supervisor (the secret is not set): its line, written
  // once (by the supervisor), with the job's line number.
  json by_supervisor = with(lines, "line", 6);
  expect_refusal_line(by_supervisor, "CORRAL_AUDIT_CLI_UNSET is not set", text);
  cr_expect(by_supervisor["id"] == "unset" && by_supervisor["argv"] == json::array({"true"}) &&
                by_supervisor["tier"] == "none",
            "%s", by_supervisor.dump().c_str());

  // corral run: the gate's refusal, and a refusal by the supervisor (an unset secret).
  const std::string run_audit = dir / "run-audit.jsonl";
  CliRun gated = run_cli({"run", "--audit", run_audit, "--untrusted", "--", "true"});
  cr_assert_eq(gated.code, 2, "exit %d: %s", gated.code, gated.err.c_str());
  CliRun unset = run_cli({"run", "--audit", run_audit, "--secret-env", "CORRAL_AUDIT_CLI_UNSET", "--", "true"});
  cr_assert_neq(unset.code, 0, "%s", unset.err.c_str());
  const std::string run_text = read_file(run_audit);
  auto run_lines = json_lines(run_text);
  cr_assert_eq(run_lines.size(), 2u, "one audit line per refused run:\n%s", run_text.c_str());
  expect_refusal_line(run_lines[0], "provenance untrusted needs tier container", run_text);
  cr_expect(run_lines[0]["line"].is_null() && run_lines[0]["argv"] == json::array({"true"}) &&
                run_lines[0]["tier"] == "os_process" && run_lines[0]["provenance"] == "untrusted",
            "%s", run_lines[0].dump().c_str());
  expect_refusal_line(run_lines[1], "CORRAL_AUDIT_CLI_UNSET is not set", run_text);
}

// On the old code an input that could not be staged gave `corral run
// --json` no Result (a message and exit 125) and the audit no line; batch
// wrote an error line, no Result. Now it is a run that did not start.
Test(audit_cli, a_run_whose_input_cannot_be_staged_has_a_result_and_an_audit_line) {
  TempDir dir;
  const std::string audit = dir / "audit.jsonl";
  cr_assert_eq(mkdir((dir / "tree").c_str(), 0755), 0);
  write_file((dir / "tree") + "/big.bin", std::string(4096, 'x'));
  cr_assert_eq(mkfifo((dir / "fifo").c_str(), 0600), 0);
  struct Case {
    std::vector<std::string> args;
    int err;
    const char* says;
  };
  const std::vector<Case> cases = {
      {{"--input", dir / "missing.txt"}, ENOENT, "missing.txt"},
      {{"--input", (dir / "tree") + ":tree", "--limit", "artifact_bytes=1000"}, EFBIG, "artifact_bytes=1000"},
      {{"--input", (dir / "fifo") + ":fifo"}, EINVAL, "neither a regular file nor a directory"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"run", "--json", "--audit", audit};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.insert(args.end(), {"--", "true"});
    CliRun r = run_cli(args);
    cr_assert_eq(r.code, 125, "%s: exit %d: %s", c.says, r.code, r.err.c_str());
    json j = json::parse(r.out, nullptr, false);
    cr_assert(!j.is_discarded() && j.is_object(), "%s: no Result on stdout: '%s' (stderr %s)", c.says, r.out.c_str(),
              r.err.c_str());
    cr_expect(j["outcome"] == "spawn_failed" && j["spawn_stage"] == "inputs" && j["spawn_errno"] == c.err,
              "%s: %s", c.says, r.out.c_str());
    cr_expect(contains(str(j, "error"), c.says), "%s: error %s", c.says, j["error"].dump().c_str());
    cr_expect(j["stdout_sha256"] == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    auto lines = json_lines(read_file(audit));
    cr_assert(!lines.empty(), "%s: no audit line", c.says);
    const json& a = lines.back();
    cr_expect(a["run_id"] == j["run_id"] && a["outcome"] == "spawn_failed" && contains(str(a, "error"), c.says),
              "%s: audit %s", c.says, a.dump().c_str());
  }
  cr_assert_eq(json_lines(read_file(audit)).size(), cases.size());
  // A name the workspace would refuse is the request's fault: refused
  // before anything is made (exit 2, no Result), and audited as a refusal.
  CliRun named = run_cli({"run", "--json", "--audit", audit, "--input", "/etc/hostname:../escape", "--", "true"});
  cr_assert_eq(named.code, 2, "exit %d: %s", named.code, named.err.c_str());
  cr_assert(named.out.empty() && contains(named.err, "'..' segment"), "%s %s", named.out.c_str(), named.err.c_str());
  expect_refusal_line(json_lines(read_file(audit)).back(), "'..' segment", read_file(audit));

  // batch: the same Result in the job's line, and its audit line.
  const std::string jobs = dir / "jobs.jsonl", batch_audit = dir / "batch-audit.jsonl";
  write_file(jobs, "{\"id\": \"over\", \"argv\": [\"true\"], \"tier\": \"none\", \"limits\": {\"artifact_bytes\": 1000}, "
                   "\"inputs\": [{\"name\": \"tree\", \"host_path\": \"" + (dir / "tree") + "\"}]}\n"
                   "{\"id\": \"next\", \"argv\": [\"true\"], \"tier\": \"none\"}\n");
  CliRun b = run_cli({"batch", "--audit", batch_audit, "--allow-host-path", dir.path(), jobs});
  cr_assert_eq(b.code, 0, "exit %d: %s", b.code, b.err.c_str());
  auto results = json_lines(b.out);
  json over = with(results, "id", "over");
  cr_assert(over["outcome"] == "spawn_failed" && over["spawn_stage"] == "inputs" && over["line"] == 1,
            "%s", b.out.c_str());
  cr_assert(with(results, "id", "next")["outcome"] == "exited", "the batch goes on: %s", b.out.c_str());
  auto audited = json_lines(read_file(batch_audit));
  cr_assert_eq(audited.size(), 2u);
  cr_assert(with(audited, "id", "over")["run_id"] == over["run_id"], "%s", read_file(batch_audit).c_str());
}

// On the old code a job's id holding a secret's value came back whole in
// its result line (the audit line masked it), and every refusal echoed it.
Test(audit_cli, a_secret_in_a_job_id_is_masked_in_every_line_corral_writes) {
  TempDir dir;
  const std::string value = "idsecret-" + std::to_string(getpid());
  const std::string env = "CORRAL_ID_SECRET=" + value;
  const std::string jobs = dir / "jobs.jsonl", audit = dir / "audit.jsonl";
  cr_assert_eq(mkdir((dir / "tree").c_str(), 0755), 0);
  write_file((dir / "tree") + "/big.bin", std::string(4096, 'x'));
  auto line = [&](const std::string& id, const std::string& rest) {
    return "{\"id\": \"" + id + "\", \"secret_env\": [\"CORRAL_ID_SECRET\"], \"argv\": [\"true\"], " + rest + "}\n";
  };
  write_file(jobs, line("ran-" + value, "\"tier\": \"none\"") +
                       line("gate-" + value, "\"tier\": \"none\", \"provenance\": \"untrusted\"") +
                       line("bogus-" + value, "\"bogus\": 1") +
                       line("path-" + value, "\"tier\": \"none\", \"inputs\": [{\"name\": \"x\", \"host_path\": \"/nonexistent/" +
                                                 value + "\"}]") +
                       line("staged-" + value, "\"tier\": \"none\", \"limits\": {\"artifact_bytes\": 1000}, "
                                               "\"inputs\": [{\"name\": \"in-" + value + "\", \"host_path\": \"" +
                                                   (dir / "tree") + "\"}]"));
  CliRun b = run_cli({"batch", "--audit", audit, "--allow-host-path", "/", jobs}, {env});
  cr_assert_eq(b.code, 0, "exit %d: %s", b.code, b.err.c_str());
  const std::string text = read_file(audit);
  cr_expect(!contains(b.out, value), "a result line carries the secret:\n%s", b.out.c_str());
  cr_expect(!contains(b.err, value), "stderr carries the secret:\n%s", b.err.c_str());
  cr_expect(!contains(text, value), "the audit carries the secret:\n%s", text.c_str());
  auto results = json_lines(b.out);
  cr_assert_eq(results.size(), 5u, "%s", b.out.c_str());
  for (const char* id : {"ran-***", "gate-***", "bogus-***", "path-***", "staged-***"}) {
    cr_expect(with(results, "id", id).is_object(), "no result line with id %s:\n%s", id, b.out.c_str());
    cr_expect(with(json_lines(text), "id", id).is_object(), "no audit line with id %s:\n%s", id, text.c_str());
  }
  cr_expect(with(results, "id", "ran-***")["outcome"] == "exited", "%s", b.out.c_str());
  cr_expect(contains(str(with(results, "id", "path-***"), "error"), "/nonexistent/***"), "%s", b.out.c_str());
  json staged = with(results, "id", "staged-***");
  cr_expect(staged["spawn_stage"] == "inputs" && contains(str(staged, "error"), "in-***"), "%s", staged.dump().c_str());
}

// --allow-user's own parse: every bad uid is a usage error naming the flag
// and the value, before any job is read.
Test(audit_cli, allow_user_refuses_a_bad_uid_naming_the_flag_and_the_value) {
  TempDir dir;
  const std::string jobs = dir / "jobs.jsonl";
  write_file(jobs, "");
  for (const char* bad : {"abc", "-1", "", "0", "1e3", "12ab", "+5", " 7", "4286578688", "4290772991", "4294967294x", "4294967295",
                          "4294967296", "99999999999", "18446744073709551617"}) {
    CliRun r = run_cli({"batch", "--allow-user", bad, jobs});
    cr_expect_eq(r.code, 2, "--allow-user '%s': exit %d (%s)", bad, r.code, r.err.c_str());
    cr_expect(r.err.rfind("corral: --allow-user: ", 0) == 0, "--allow-user '%s': %s", bad, r.err.c_str());
    cr_expect(contains(r.err, std::string("'") + bad + "'") || contains(r.err, std::string(" ") + bad + " "),
              "--allow-user '%s': the value is not named: %s", bad, r.err.c_str());
    cr_expect(r.out.empty(), "--allow-user '%s': %s", bad, r.out.c_str());
  }
  CliRun good = run_cli({"batch", "--allow-user", "4294967294", "--allow-user=5000", jobs});
  cr_expect_eq(good.code, 0, "%s", good.err.c_str());
}
