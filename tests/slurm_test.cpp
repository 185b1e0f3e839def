// corral batch --shard under a real Slurm (slurm_support.hpp starts a
// single-node one): examples/slurm/submit.sh runs a 4-task array over a
// job file of a few hundred mixed jobs and the dependent merge job, and
// the merge must equal one `corral batch` of the same file, job by job
// (id, outcome, exit code, SHA-256 of stdout). Then one task killed
// midway, rerun alone, and merged again.
#include <signal.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "shard_support.hpp"
#include "slurm_support.hpp"
#include "support.hpp"

using corral_test::SlurmCluster;
using corral_test::contains;
using nlohmann::json;

namespace {

// Through a reference that outlives the assertion: c_str() of a temporary
// reached the macro out of scope (make asan: stack-use-after-scope).
void expect_empty(const std::string& text, const char* what) {
  cr_expect_str_empty(text.c_str(), "%s: %s", what, text.c_str());
}

SlurmCluster* g_cluster = nullptr;

void stop_cluster() {
  if (g_cluster) g_cluster->stop();
}

// Slurm and munge installed, root (SlurmUser=root): else the reason.
std::string unmet() {
  if (geteuid() != 0) return "needs root (the test's slurmd runs jobs as root)";
  std::string missing = corral_test::missing_program({"munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol"});
  if (!missing.empty())
    return missing + " is not installed (scripts/install-deps installs slurm-wlm and munge from Debian)";
  return "";
}

std::string repo_path(const std::string& rel) {
  char* real = realpath(rel.c_str(), nullptr);
  std::string out = real ? real : rel;
  free(real);
  return out;
}

// Paths under /etc and /run whose name says slurm or munge, newer than `marker`.
std::string slurm_leftovers(const std::string& marker) {
  std::string cmd = "find /etc /run -xdev \\( -iname '*slurm*' -o -iname '*munge*' \\) -newer " + marker +
                    " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[1024];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  if (p) pclose(p);
  return out;
}

// submit.sh's environment: where the job file, the results and corral are.
std::string submit_env(const std::string& jobs, const std::string& results, int shards,
                       const std::string& batch_opts = "") {
  return "JOBS=" + jobs + " RESULTS=" + results + " SHARDS=" + std::to_string(shards) +
         " CORRAL=" + corral_test::build_dir() + "/bin/corral CORRAL_BATCH_OPTS='" + batch_opts + "' ";
}

std::string results_of(const std::string& dir) { return corral_test::read_file(dir + "/merged.jsonl"); }

}  // namespace

Test(slurm, a_job_array_of_four_shards_and_the_merge_job_equal_one_batch, .fini = stop_cluster, .timeout = 240) {
  if (auto why = unmet(); !why.empty()) cr_skip_test("%s", why.c_str());
  SlurmCluster cluster;
  g_cluster = &cluster;
  corral_test::TempDir scratch;
  std::string marker = scratch / "marker";
  corral_test::write_file(marker, "");
  std::string failed = cluster.start(4);
  cr_assert(failed.empty(), "%s", failed.c_str());
  cr_log_info("single-node Slurm up in %.1f s", cluster.up_seconds());

  std::string work = cluster.work();
  std::string jobs = work + "/jobs.jsonl", results = work + "/results";
  corral_test::write_file(jobs, corral_test::mixed_jobs(300, true));
  auto single = corral_test::run_cli({"batch", jobs});
  cr_assert_eq(single.code, 0, "%s", single.err.c_str());
  auto want = corral_test::job_views(single.out);
  cr_assert_eq(want.size(), 300u);

  int rc = 0;
  std::string submitted = cluster.command("cd " + work + " && " + submit_env(jobs, results, 4) +
                                              repo_path("examples/slurm/submit.sh"), &rc);
  cr_assert_eq(rc, 0, "submit.sh: %s", submitted.c_str());
  std::string array, merge;
  std::istringstream(submitted) >> array >> merge;
  std::string state = cluster.wait_done(merge, 120);
  cr_assert_eq(state, "COMPLETED", "merge job %s: %s\n%s\n%s", merge.c_str(), state.c_str(),
               cluster.command("scontrol -o show job " + array).c_str(), cluster.command("cat " + work + "/*.log").c_str());
  for (int i = 0; i < 4; ++i)
    cr_expect_eq(cluster.wait_done(array + "_" + std::to_string(i), 5), "COMPLETED", "task %d", i);

  std::string merged = results_of(results);
  expect_empty(corral_test::view_difference(want, corral_test::job_views(merged)), "merged differs from one batch");
  json summary = json::parse(corral_test::read_file(results + "/summary.json"));
  cr_expect_eq(summary["jobs"].get<int>(), 300);
  cr_expect_eq(summary["shards"].get<int>(), 4);
  cr_expect_gt(summary["outcomes"].value("killed_timeout", 0), 0);
  cr_expect_eq(summary["outcomes"].value("error", 0), 2);  // the malformed line, the refused job
  // The container-tier jobs ran as such under slurmd (or failed the same
  // way in both, which the comparison above already holds equal).
  std::size_t boxes = 0;
  std::istringstream lines(merged);
  for (std::string line; std::getline(lines, line);) {
    json j = json::parse(line);
    boxes += j.value("tier", "") == "container" && j.value("outcome", "") == "exited";
  }
  cr_expect_gt(boxes, 0u, "no container-tier job ran under Slurm");

  cluster.stop();
  expect_empty(cluster.leftovers(), "children left after the daemons");
  for (pid_t pid : cluster.daemon_pids()) cr_expect_eq(pid, -1);
  expect_empty(slurm_leftovers(marker), "slurm processes left");
}

Test(slurm, a_task_killed_midway_is_rerun_alone_and_the_merge_completes, .fini = stop_cluster, .timeout = 240) {
  if (auto why = unmet(); !why.empty()) cr_skip_test("%s", why.c_str());
  SlurmCluster cluster;
  g_cluster = &cluster;
  std::string failed = cluster.start(4);
  cr_assert(failed.empty(), "%s", failed.c_str());

  // 80 jobs of ~0.2 s, two at a time per shard: a shard takes ~2 s.
  std::string work = cluster.work();
  std::string jobs = work + "/jobs.jsonl", results = work + "/results";
  std::string text;
  for (int k = 0; k < 80; ++k) {
    json j;
    j["id"] = "slow-" + std::to_string(k);
    j["argv"] = std::vector<std::string>{"/bin/sh", "-c", "sleep 0.2; echo " + std::to_string(k)};
    text += j.dump() + "\n";
  }
  corral_test::write_file(jobs, text);
  auto single = corral_test::run_cli({"batch", jobs});
  cr_assert_eq(single.code, 0);

  int rc = 0;
  std::string submitted = cluster.command("cd " + work + " && " + submit_env(jobs, results, 4, "-p 2") +
                                              repo_path("examples/slurm/submit.sh"), &rc);
  cr_assert_eq(rc, 0, "%s", submitted.c_str());
  std::string array, merge;
  std::istringstream(submitted) >> array >> merge;
  // Kill task 1 once some of its results are out, none of its end.
  std::string shard1;
  bool midway = SlurmCluster::wait_for([&] {
    shard1 = cluster.command("cat " + results + "/shard-1.*.jsonl");
    return std::count(shard1.begin(), shard1.end(), '\n') >= 3;
  }, 60);
  cr_assert(midway, "task 1 wrote no results: %s", shard1.c_str());
  cluster.command("scancel --signal=KILL --full " + array + "_1");
  cr_expect_neq(cluster.wait_done(array + "_1", 30), "COMPLETED");
  for (int i : {0, 2, 3}) cr_expect_eq(cluster.wait_done(array + "_" + std::to_string(i), 60), "COMPLETED");
  shard1 = cluster.command("cat " + results + "/shard-1.*.jsonl");
  cr_assert(!contains(shard1, "shard_end"), "task 1 finished before it was killed");
  // afterok can no longer be met: the merge job never runs.
  cr_expect(!SlurmCluster::wait_for([&] { return access((results + "/merged.jsonl").c_str(), F_OK) == 0; }, 2));
  cluster.command("scancel " + merge);

  // Merging now names the shard that did not finish.
  std::string files = cluster.command("ls " + results);
  std::vector<std::string> args{"merge", "--jobs", jobs, "-o", results + "/merged.jsonl"};
  std::istringstream names(files);
  for (std::string n; names >> n;)
    if (n.rfind("shard-", 0) == 0) args.push_back(results + "/" + n);
  auto refused = corral_test::run_cli(args);
  cr_expect_eq(refused.code, 1);
  cr_expect(contains(refused.err, "shard 1/4 did not finish"), "%s", refused.err.c_str());

  // Rerun task 1 alone, then the merge job after it.
  std::string env = "JOBS=" + jobs + " RESULTS=" + results + " SHARDS=4 CORRAL=" + corral_test::build_dir() +
                    "/bin/corral CORRAL_BATCH_OPTS='-p 2' ";
  std::string rerun = cluster.command("cd " + work + " && " + env + "sbatch --parsable --array=1 --export=ALL " +
                                      repo_path("examples/slurm/shard.sbatch"), &rc);
  cr_assert_eq(rc, 0, "%s", rerun.c_str());
  rerun = rerun.substr(0, rerun.find_first_of(";\n"));
  std::string remerge = cluster.command("cd " + work + " && " + env + "sbatch --parsable --dependency=afterok:" +
                                        rerun + " --export=ALL " + repo_path("examples/slurm/merge.sbatch"), &rc);
  remerge = remerge.substr(0, remerge.find_first_of(";\n"));
  std::string state = cluster.wait_done(remerge, 60);
  cr_assert_eq(state, "COMPLETED", "%s\n%s", state.c_str(), cluster.command("cat " + work + "/*.log").c_str());
  cr_expect(contains(cluster.command("cat " + work + "/corral-merge-" + remerge + ".log"), "which did not finish"));
  expect_empty(corral_test::view_difference(corral_test::job_views(single.out),
                                            corral_test::job_views(results_of(results))),
               "the rerun's merge differs from one batch");
  cluster.stop();
  expect_empty(cluster.leftovers(), "children left after the daemons");
}
