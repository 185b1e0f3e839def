// A request corral would refuse is refused before its program runs, with
// exit 2 (DESIGN: "2 usage error or a limit it refuses") and a message that
// names the field: a limit this host cannot hold, an output the collector
// would never deliver. Each program here leaves a mark on the host when it
// runs; a refusal must leave none.
#include <linux/capability.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.hpp"
#include "corral/capabilities.hpp"
#include "support.hpp"

using namespace corral_test;

namespace {

// `corral run --tier none ARGS -- sh -c 'echo ran > MARK'`; the mark says whether the
// program ran.
struct MarkedRun {
  CliRun cli;
  bool ran = false;
};

MarkedRun run_marked(std::vector<std::string> args) {
  TempDir dir;
  std::string mark = dir / "ran";
  // Tier none: the program runs as us, so the mark is writable wherever
  // the test made it (a process-tier run's uid could not write it, and
  // its absence would prove nothing).
  args.insert(args.begin(), {"run", "--tier", "none"});
  for (const char* a : {"--", "/bin/sh", "-c"}) args.push_back(a);
  args.push_back("echo ran > " + mark);
  MarkedRun m{run_cli(args), false};
  m.ran = ::access(mark.c_str(), F_OK) == 0;
  return m;
}

void expect_refused_before_the_run(const MarkedRun& m, const std::string& names) {
  cr_expect_eq(m.cli.code, 2, "exit %d, stderr: %s", m.cli.code, m.cli.err.c_str());
  cr_expect(!m.ran, "the program ran before the refusal (stderr: %s)", m.cli.err.c_str());
  cr_expect(m.cli.err.find(names) != std::string::npos, "the message does not name %s: %s", names.c_str(),
            m.cli.err.c_str());
  cr_expect(m.cli.err.rfind("corral: ", 0) == 0, "%s", m.cli.err.c_str());
}

}  // namespace

Test(cli_refusal, open_files_above_nr_open_is_a_refused_limit) {
  std::uint64_t nr_open = std::stoull(read_file("/proc/sys/fs/nr_open"));
  for (const std::string& value : {std::to_string(nr_open + 1), std::string("99999999999")}) {
    MarkedRun m = run_marked({"-l", "open_files=" + value});
    expect_refused_before_the_run(m, "open_files=" + value);
    cr_expect(m.cli.err.find("nr_open") != std::string::npos, "%s", m.cli.err.c_str());
  }
}

Test(cli_refusal, open_files_above_our_own_hard_limit_is_a_refused_limit) {
  if (corral::has_effective_capability(CAP_SYS_RESOURCE))
    cr_skip_test("CAP_SYS_RESOURCE is effective: any hard limit up to nr_open can be raised");
  struct rlimit ours {};
  cr_assert_eq(getrlimit(RLIMIT_NOFILE, &ours), 0);
  if (ours.rlim_max == RLIM_INFINITY || ours.rlim_max + 1 > std::stoull(read_file("/proc/sys/fs/nr_open")))
    cr_skip_test("our hard RLIMIT_NOFILE is at nr_open: the nr_open test covers it");
  // The CLI inherits this process's hard limit.
  MarkedRun m = run_marked({"-l", "open_files=" + std::to_string(ours.rlim_max + 1)});
  expect_refused_before_the_run(m, "open_files");
  cr_expect(m.cli.err.find("CAP_SYS_RESOURCE") != std::string::npos, "%s", m.cli.err.c_str());
}

Test(cli_refusal, an_output_the_collector_would_refuse_stops_the_run_before_it_starts) {
  struct Case {
    std::vector<std::string> args;
    std::string names;
  };
  for (const Case& c : std::vector<Case>{
           {{"--output", "../x"}, "'../x' has a '..' segment"},
           {{"--output", "/etc/passwd"}, "'/etc/passwd' is absolute"},
           {{"--output", "a//b"}, "'a//b' has an empty segment"},
           {{"--output", "ok.txt", "--output", "a\\b"}, "'a\\b' contains a backslash"},
       }) {
    MarkedRun m = run_marked(c.args);
    expect_refused_before_the_run(m, c.names);
    cr_expect(m.cli.err.find("outputs") != std::string::npos, "%s", m.cli.err.c_str());
  }
  // The same with --json: no Result, because no run happened.
  MarkedRun j = run_marked({"--json", "--output", "../x"});
  expect_refused_before_the_run(j, "'..' segment");
  cr_expect(j.cli.out.empty(), "stdout: %s", j.cli.out.c_str());
}

// In a batch the bad line is refused on its own; its neighbours run.
Test(cli_refusal, a_batch_line_with_a_bad_output_is_refused_and_its_neighbours_run) {
  TempDir dir;
  std::string jobs = dir / "jobs.jsonl";
  std::string mark = dir / "bad-ran";
  {
    std::ofstream f(jobs);
    f << R"({"id":"good-1","argv":["/bin/true"]})" << "\n";
    f << R"({"id":"bad","tier":"none","argv":["/bin/sh","-c","echo ran > )" << mark << R"("],"outputs":["../escape"]})" << "\n";
    f << R"({"id":"good-2","argv":["/bin/true"]})" << "\n";
  }
  CliRun b = run_cli({"batch", "--parallel", "2", jobs});
  cr_expect(::access(mark.c_str(), F_OK) != 0, "the bad line's program ran");
  int good = 0;
  bool bad_named = false;
  std::size_t at = 0;
  while (at < b.out.size()) {
    std::size_t nl = b.out.find('\n', at);
    std::string line = b.out.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    at = nl == std::string::npos ? b.out.size() : nl + 1;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    std::string id = j.value("id", "");
    if ((id == "good-1" || id == "good-2") && j.value("outcome", "") == "exited") ++good;
    if (id == "bad" && j.dump().find("'..' segment") != std::string::npos) bad_named = true;
  }
  cr_expect_eq(good, 2, "stdout: %s\nstderr: %s", b.out.c_str(), b.err.c_str());
  cr_expect(bad_named, "the bad line's refusal does not say why; stdout: %s\nstderr: %s", b.out.c_str(),
            b.err.c_str());
}
