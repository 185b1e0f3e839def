// corral batch --shard and corral merge, on one machine: the split is a
// partition of the job file, the merge equals one batch or refuses naming
// what is wrong, a killed shard rerun alone completes the merge. The same
// against a real Slurm is slurm_test.cpp.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "cli_runner.hpp"
#include "corral/shard.hpp"
#include "shard_support.hpp"
#include "support.hpp"

using corral_test::run_cli;
using corral_test::TempDir;
using corral_test::contains;
using nlohmann::json;

namespace {

// Through a reference that outlives the assertion: c_str() of a temporary
// reached the macro out of scope (make asan: stack-use-after-scope).
void expect_empty(const std::string& text, const char* what) {
  cr_expect_str_empty(text.c_str(), "%s: %s", what, text.c_str());
}


std::function<const char*(const char*)> env_of(std::map<std::string, std::string> vars) {
  auto held = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [held](const char* name) -> const char* {
    auto it = held->find(name);
    return it == held->end() ? nullptr : it->second.c_str();
  };
}

// `corral ARGS > out_path` in the background; its pid.
pid_t spawn_cli(const std::vector<std::string>& args, const std::string& out_path) {
  std::string cli = corral_test::build_dir() + "/bin/corral";
  pid_t pid = fork();
  if (pid == 0) {
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int null = open("/dev/null", O_WRONLY);
    if (out < 0 || dup2(out, 1) < 0 || dup2(null, 2) < 0) _exit(126);
    std::vector<char*> argv{cli.data()};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(cli.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

// ---- the spec ---------------------------------------------------------------

Test(shard_spec, explicit_index_and_count) {
  auto none = env_of({});
  auto s = corral::parse_shard("2/4", none);
  cr_assert(s.ok());
  cr_expect_eq(s->index, 2u);
  cr_expect_eq(s->count, 4u);
  cr_expect(s->owns(2) && s->owns(6) && !s->owns(3));
  for (const char* bad : {"4/4", "1/0", "-1/4", "1", "a/b", "1/4x", "/4", "auto/", "0/100001"})
    cr_expect(!corral::parse_shard(bad, none).ok(), "'%s' should be refused", bad);
  cr_expect(contains(corral::parse_shard("4/4", none).error().message(), "below the count"));
}

Test(shard_spec, auto_reads_a_slurm_array_task) {
  auto s = corral::parse_shard("auto", env_of({{"SLURM_ARRAY_TASK_ID", "3"},
                                               {"SLURM_ARRAY_TASK_COUNT", "4"},
                                               {"SLURM_ARRAY_TASK_MIN", "0"},
                                               {"SLURM_ARRAY_TASK_MAX", "3"},
                                               {"SLURM_ARRAY_TASK_STEP", "1"}}));
  cr_assert(s.ok(), "%s", s.error().message().c_str());
  cr_expect_eq(s->name(), "3/4");
  // An array 1-4: task ids are not shard indexes; refused, not shifted.
  auto shifted = corral::parse_shard("auto", env_of({{"SLURM_ARRAY_TASK_ID", "1"},
                                                     {"SLURM_ARRAY_TASK_COUNT", "4"},
                                                     {"SLURM_ARRAY_TASK_MIN", "1"},
                                                     {"SLURM_ARRAY_TASK_MAX", "4"}}));
  cr_assert(!shifted.ok());
  cr_expect(contains(shifted.error().message(), "not 0-3"), "%s", shifted.error().message().c_str());
  // A rerun of task 2 alone (--array=2): COUNT=1, so the count is given.
  auto rerun = env_of({{"SLURM_ARRAY_TASK_ID", "2"},
                       {"SLURM_ARRAY_TASK_COUNT", "1"},
                       {"SLURM_ARRAY_TASK_MIN", "2"},
                       {"SLURM_ARRAY_TASK_MAX", "2"}});
  cr_expect(!corral::parse_shard("auto", rerun).ok());
  auto given = corral::parse_shard("auto/4", rerun);
  cr_assert(given.ok(), "%s", given.error().message().c_str());
  cr_expect_eq(given->name(), "2/4");
}

Test(shard_spec, auto_reads_a_kubernetes_completion_index_and_needs_the_count) {
  auto pod = env_of({{"JOB_COMPLETION_INDEX", "1"}});
  auto bare = corral::parse_shard("auto", pod);
  cr_assert(!bare.ok());
  cr_expect(contains(bare.error().message(), "auto/N"), "%s", bare.error().message().c_str());
  auto s = corral::parse_shard("auto/3", pod);
  cr_assert(s.ok());
  cr_expect_eq(s->name(), "1/3");
  cr_expect(!corral::parse_shard("auto/1", pod).ok());  // index 1 of 1
}

Test(shard_spec, auto_with_neither_engine_or_both_is_refused_by_the_cli) {
  auto neither = run_cli({"batch", "--shard", "auto", "/dev/null"});
  cr_expect_eq(neither.code, 2);
  cr_expect(contains(neither.err, "neither SLURM_ARRAY_TASK_ID") && contains(neither.err, "JOB_COMPLETION_INDEX"), "%s",
            neither.err.c_str());
  auto both = run_cli({"batch", "--shard", "auto/2", "/dev/null"},
                      {"SLURM_ARRAY_TASK_ID=0", "SLURM_ARRAY_TASK_COUNT=2", "JOB_COMPLETION_INDEX=0"});
  cr_expect_eq(both.code, 2);
  cr_expect(contains(both.err, "both"), "%s", both.err.c_str());
  auto from_stdin = run_cli({"batch", "--shard", "0/2"});
  cr_expect_eq(from_stdin.code, 2);
  cr_expect(contains(from_stdin.err, "needs the job FILE"), "%s", from_stdin.err.c_str());
}

// ---- split and merge ----------------------------------------------------------

struct Sharded {
  TempDir dir;
  std::string jobs = dir / "jobs.jsonl";
  std::vector<std::string> shard_files;
  std::string single;  // one batch's output

  Sharded(const std::string& text, unsigned n, std::vector<std::string> extra = {}) {
    corral_test::write_file(jobs, text);
    for (unsigned i = 0; i < n; ++i) {
      std::vector<std::string> args{"batch", "--shard", std::to_string(i) + "/" + std::to_string(n)};
      args.insert(args.end(), extra.begin(), extra.end());
      args.push_back(jobs);
      auto r = run_cli(args);
      cr_assert_eq(r.code, 0, "shard %u/%u: exit %d: %s", i, n, r.code, r.err.c_str());
      shard_files.push_back(dir / ("shard-" + std::to_string(i) + ".jsonl"));
      corral_test::write_file(shard_files.back(), r.out);
    }
    std::vector<std::string> args{"batch"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(jobs);
    auto r = run_cli(args);
    cr_assert_eq(r.code, 0, "single batch: %s", r.err.c_str());
    single = r.out;
  }

  corral_test::CliRun merge(std::vector<std::string> files, std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"merge", "--jobs", jobs};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), files.begin(), files.end());
    return run_cli(args);
  }
};

Test(shard, every_job_is_in_exactly_one_shard_and_the_merge_equals_one_batch) {
  CORRAL_SKIP_UNLESS_ROOT();  // process-tier jobs need the uid pool
  std::string text = corral_test::mixed_jobs(60, true);
  text += std::string(3000, 'x') + "\n";  // over the cap below: an error result, one shard's
  Sharded s(text, 3, {"--max-line-bytes", "2000"});
  auto want = corral_test::job_views(s.single);

  std::map<long, corral_test::JobView> all;
  std::set<std::string> shard_names;
  int malformed_reports = 0, too_long_reports = 0;
  for (const auto& f : s.shard_files) {
    std::string text_f = corral_test::read_file(f);
    int dups = 0;
    for (const auto& [line, v] : corral_test::job_views(text_f, &dups)) {
      cr_expect(all.emplace(line, v).second, "line %ld has results in two shards", line);
    }
    cr_expect_eq(dups, 0);
    too_long_reports += contains(text_f, "longer than the --max-line-bytes cap");
    malformed_reports += contains(text_f, "not valid JSON");
    // Every result line names its shard and the job file's fingerprint.
    std::istringstream in(text_f);
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line);
      if (j.contains("shard_end")) continue;
      shard_names.insert(j["shard"].get<std::string>());
      cr_expect_eq(j["jobs_sha256"].get<std::string>().size(), 64u);
    }
    cr_expect(contains(text_f, "\"shard_end\""), "%s has no end record", f.c_str());
  }
  cr_expect_eq(shard_names.size(), 3u);
  cr_expect_eq(malformed_reports, 1, "the malformed line is reported by exactly one shard");
  cr_expect_eq(too_long_reports, 1, "the too-long line is reported by exactly one shard");
  expect_empty(corral_test::view_difference(want, all), "the shards differ from one batch");

  std::string merged = s.dir / "merged.jsonl", summary = s.dir / "summary.json";
  auto m = s.merge(s.shard_files, {"-o", merged, "--summary", summary});
  cr_assert_eq(m.code, 0, "%s", m.err.c_str());
  std::string out = corral_test::read_file(merged);
  expect_empty(corral_test::view_difference(want, corral_test::job_views(out)), "the merge differs from one batch");
  cr_expect(!contains(out, "\"shard\"") && !contains(out, "jobs_sha256") && !contains(out, "shard_end"));
  // In job-file order, one line per job.
  long last = 0;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    long at = json::parse(line)["line"].get<long>();
    cr_expect_gt(at, last);
    last = at;
  }
  json sum = json::parse(corral_test::read_file(summary));
  std::map<std::string, std::size_t> counts;
  for (const auto& [line, v] : want) ++counts[std::get<1>(v)];
  cr_expect_eq(sum["jobs"].get<std::size_t>(), want.size());
  for (const auto& [outcome, n] : counts) cr_expect_eq(sum["outcomes"].value(outcome, 0ul), n, "%s", outcome.c_str());
  cr_expect_gt(counts["killed_timeout"], 0u);
  cr_expect(contains(m.err, "jobs from 3 shards"), "%s", m.err.c_str());
}

Test(shard, merge_refuses_a_missing_shard_by_name_and_writes_nothing) {
  Sharded s(corral_test::mixed_jobs(12, false), 3);
  std::string merged = s.dir / "merged.jsonl";
  auto m = s.merge({s.shard_files[0], s.shard_files[2]}, {"-o", merged});
  cr_expect_eq(m.code, 1);
  cr_expect(contains(m.err, "shard 1/3 is missing"), "%s", m.err.c_str());
  cr_expect(access(merged.c_str(), F_OK) != 0 && access((merged + ".tmp").c_str(), F_OK) != 0);
}

Test(shard, merge_refuses_shards_of_another_job_file_and_results_that_do_not_add_up) {
  Sharded s(corral_test::mixed_jobs(12, false), 2);
  // The same shards against an edited job file: the fingerprint differs.
  std::string edited = s.dir / "edited.jsonl";
  corral_test::write_file(edited, corral_test::read_file(s.jobs) + R"({"id":"late","argv":["true"]})" "\n");
  auto other = run_cli({"merge", "--jobs", edited, s.shard_files[0], s.shard_files[1]});
  cr_expect_eq(other.code, 1);
  cr_expect(contains(other.err, "ran on another job file"), "%s", other.err.c_str());
  // A result taken out of a finished shard: the job is named.
  std::string text = corral_test::read_file(s.shard_files[1]);
  std::size_t first_nl = text.find('\n');
  std::string gone_id = json::parse(text.substr(0, first_nl))["id"];
  corral_test::write_file(s.dir / "cut.jsonl", text.substr(first_nl + 1));
  auto cut = s.merge({s.shard_files[0], s.dir / "cut.jsonl"});
  cr_expect_eq(cut.code, 1);
  cr_expect(contains(cut.err, "(id '" + gone_id + "') has no result in shard 1/2"), "%s", cut.err.c_str());
  // A shard given twice in one file is a duplicate, not a rerun.
  corral_test::write_file(s.dir / "twice.jsonl", text.substr(0, first_nl + 1) + text);
  auto twice = s.merge({s.shard_files[0], s.dir / "twice.jsonl"});
  cr_expect_eq(twice.code, 1);
  cr_expect(contains(twice.err, "a second result for job line"), "%s", twice.err.c_str());
  // Shards of different counts.
  auto r = run_cli({"batch", "--shard", "0/3", s.jobs});
  corral_test::write_file(s.dir / "of3.jsonl", r.out);
  auto mixed = s.merge({s.dir / "of3.jsonl", s.shard_files[1]});
  cr_expect_eq(mixed.code, 1);
  cr_expect(contains(mixed.err, "one of 2 shards") || contains(mixed.err, "one of 3 shards"), "%s", mixed.err.c_str());
}

Test(shard, a_rerun_shard_replaces_the_old_one) {
  Sharded s(corral_test::mixed_jobs(10, false), 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto again = run_cli({"batch", "--shard", "1/2", s.jobs});
  cr_assert_eq(again.code, 0);
  std::string rerun = s.dir / "shard-1.rerun.jsonl";
  corral_test::write_file(rerun, again.out);
  // Given before the old file, the rerun still wins: it finished later.
  auto m = s.merge({rerun, s.shard_files[0], s.shard_files[1]});
  cr_assert_eq(m.code, 0, "%s", m.err.c_str());
  cr_expect(contains(m.err, "shard 1/2: " + rerun + " replaces " + s.shard_files[1]), "%s", m.err.c_str());
  std::set<std::string> run_ids;
  std::istringstream in(m.out);
  for (std::string line; std::getline(in, line);) run_ids.insert(json::parse(line).value("run_id", ""));
  std::istringstream rin(again.out);
  std::size_t from_rerun = 0;
  for (std::string line; std::getline(rin, line);) from_rerun += run_ids.count(json::parse(line).value("run_id", "-"));
  cr_expect_eq(from_rerun, 5u, "the rerun's 5 results are the ones merged");
}

Test(shard, a_killed_shard_rerun_alone_completes_the_merge) {
  CORRAL_SKIP_UNLESS_ROOT();
  // Jobs slow enough that a shard is killed with some written, some not.
  std::string text;
  for (int k = 0; k < 24; ++k)
  {
    json j;
    j["id"] = "slow-" + std::to_string(k);
    j["argv"] = std::vector<std::string>{"/bin/sh", "-c", "sleep 0.3; echo " + std::to_string(k)};
    text += j.dump() + "\n";
  }
  Sharded s(text, 2, {"-p", "2"});
  std::string killed = s.dir / "shard-1.killed.jsonl";
  pid_t pid = spawn_cli({"batch", "-p", "2", "--shard", "1/2", s.jobs}, killed);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto lines = [&] {
    std::string t = corral_test::read_file(killed);
    return std::count(t.begin(), t.end(), '\n');
  };
  while (lines() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  std::string partial = corral_test::read_file(killed);
  auto seen = corral_test::job_views(partial);
  cr_assert(seen.size() >= 3 && seen.size() < 12, "killed after %zu of 12 results", seen.size());
  cr_expect(!contains(partial, "shard_end"));

  auto refused = s.merge({s.shard_files[0], killed});
  cr_expect_eq(refused.code, 1);
  cr_expect(contains(refused.err, "shard 1/2 did not finish"), "%s", refused.err.c_str());
  // The rerun of shard 1 alone, next to the killed run's file.
  auto rerun = run_cli({"batch", "-p", "2", "--shard", "1/2", s.jobs});
  cr_assert_eq(rerun.code, 0);
  corral_test::write_file(s.dir / "shard-1.rerun.jsonl", rerun.out);
  auto m = s.merge({s.shard_files[0], killed, s.dir / "shard-1.rerun.jsonl"});
  cr_assert_eq(m.code, 0, "%s", m.err.c_str());
  cr_expect(contains(m.err, "which did not finish"), "%s", m.err.c_str());
  expect_empty(corral_test::view_difference(corral_test::job_views(s.single), corral_test::job_views(m.out)),
               "the rerun's merge differs from one batch");
}

// ---- the examples ---------------------------------------------------------------

Test(shard_examples, kubernetes_manifests_parse_and_say_what_they_need) {
  if (system("python3 -c 'import yaml' 2>/dev/null") != 0) cr_skip_test("python3-yaml is not installed");
  TempDir dir;
  std::string script = dir / "check.py";
  corral_test::write_file(script, R"PY(
import sys, yaml
docs = {}
for path in sys.argv[1:]:
    for d in yaml.safe_load_all(open(path)):
        if d: docs.setdefault(d["kind"], []).append(d)
jobs = docs["Job"]
shard = [j for j in jobs if j["spec"].get("completionMode") == "Indexed"]
assert len(shard) == 1, "one Indexed Job"
spec = shard[0]["spec"]
assert spec["completions"] == spec["parallelism"] or spec["parallelism"] <= spec["completions"]
pod = spec["template"]["spec"]
c = pod["containers"][0]
cmd = " ".join(c.get("command", []) + c.get("args", []))
assert "--shard auto/%d" % spec["completions"] in cmd, cmd
assert pod["restartPolicy"] == "Never"
assert pod.get("hostUsers") is False, "user namespaces (hostUsers: false)"
sc = c["securityContext"]
assert sc["seccompProfile"]["type"] in ("RuntimeDefault", "Unconfined", "Localhost")
assert sc["procMount"] in ("Unmasked", "Default")
merge = [j for j in jobs if j is not shard[0]]
assert merge and "corral merge" in " ".join(sum([x.get("command", []) + x.get("args", []) for x in merge[0]["spec"]["template"]["spec"]["containers"]], []))
assert "ConfigMap" in docs
print("ok", len(jobs), "jobs")
)PY");
  std::string cmd = "python3 " + script + " examples/kubernetes/*.yaml 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  cr_assert(p);
  char buf[4096];
  std::string out;
  while (std::size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int rc = pclose(p);
  cr_expect_eq(rc, 0, "%s", out.c_str());
  cr_expect(contains(out, "ok 2 jobs"), "%s", out.c_str());
}

Test(shard_examples, slurm_scripts_are_valid_bash) {
  for (const char* f : {"examples/slurm/shard.sbatch", "examples/slurm/merge.sbatch", "examples/slurm/submit.sh"}) {
    cr_assert_eq(access(f, R_OK), 0, "%s is missing (tests run from the repository root)", f);
    std::string cmd = std::string("bash -n ") + f;
    cr_expect_eq(system(cmd.c_str()), 0, "%s", f);
  }
}
