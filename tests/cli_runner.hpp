// Runs the corral CLI binary the tests were built with and captures its
// exit code, stdout and stderr (through files, so neither stream can fill a
// pipe while the other is read).
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "support.hpp"

namespace corral_test {

struct CliRun {
  int code = -1;  // exit code; 128+signal when a signal ended it
  long max_rss_kb = 0;  // peak RSS of corral (and of what it ran), from wait4
  std::string out, err;
};

// `env` entries ("K=V") are added to the test's environment.
inline CliRun run_cli(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  TempDir capture;
  std::string out_path = capture / "out", err_path = capture / "err";
  std::string cli = build_dir() + "/bin/corral";
  pid_t pid = fork();
  if (pid == 0) {
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(126);
    for (const auto& kv : env) putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> argv{const_cast<char*>(cli.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(cli.c_str(), argv.data());
    _exit(127);
  }
  CliRun run;
  int status = 0;
  struct rusage usage {};
  if (pid > 0 && wait4(pid, &status, 0, &usage) == pid) {
    run.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    run.max_rss_kb = usage.ru_maxrss;
  }
  run.out = read_file(out_path);
  run.err = read_file(err_path);
  return run;
}

}  // namespace corral_test
