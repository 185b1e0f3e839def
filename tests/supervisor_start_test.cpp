// What a supervisor no longer asks the kernel at create, and still gets
// right: through the real CLI, a one-run process (supervisor.cpp).
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstddef>
#include <string>
#include <vector>

#include "support.hpp"

using namespace corral_test;

namespace {

// Forks `corral ARGS...` with stdout to `out_path` and stdin and stderr on
// /dev/null; `before_exec`, when given, runs in the child just before the
// exec (and _exits 126 itself if it fails).
pid_t start_cli(const std::string& out_path, const std::vector<std::string>& args, void (*before_exec)() = nullptr) {
  const std::string bin = build_dir() + "/bin/corral";
  std::vector<char*> argv{const_cast<char*>(bin.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid != 0) return pid;
  int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  int null = open("/dev/null", O_RDWR);
  if (out < 0 || null < 0) _exit(126);
  dup2(null, 0);
  dup2(out, 1);
  dup2(null, 2);
  if (before_exec) before_exec();
  execv(bin.c_str(), argv.data());
  _exit(127);
}

// As a kernel before Linux 5.8 would: every preadv2 fails with EOPNOTSUPP.
void refuse_preadv2() {
  sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_preadv2, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EOPNOTSUPP),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof code / sizeof code[0]), code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
    _exit(126);
}

}  // namespace

// The supervisor no longer probes whether preadv2(RWF_NOWAIT) reads a pipe
// (a pipe2, a preadv2 and two closes at every create): it assumes so, and
// a kernel that refuses the flag (EOPNOTSUPP, before Linux 5.8) makes the
// refused pipe's end O_NONBLOCK and reads it again. Here a seccomp filter
// refuses every preadv2 with EOPNOTSUPP, as such a kernel would. The
// program writes a line, then sleeps past a 1 s deadline holding its
// stdout open: the line must be passed on, and the deadline must still
// fire (exit 124), which it could not if the loop sat in a blocking read
// of the empty pipe until the sleep ended.
Test(supervisor_start, a_kernel_that_refuses_rwf_nowait_on_pipes_still_gets_output_and_the_deadline) {
  TempDir dir;
  const std::string out_path = dir / "out";
  pid_t pid = start_cli(out_path,
                        {"run", "--tier", "none", "--limit", "wall_seconds=1", "--", "/bin/sh", "-c",
                         "echo first line; exec sleep 20"},
                        refuse_preadv2);
  cr_assert_geq(pid, 0);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status), "corral died of signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  cr_assert_eq(WEXITSTATUS(status), 124, "corral exited %d, not 124 (the deadline)", WEXITSTATUS(status));
  cr_assert_eq(read_file(out_path), "first line\n");
}

// watch_signals() no longer submits its signalfd poll on its own: the poll
// goes in with the loop's next io_uring_enter. SIGTERM to a one-run CLI
// whose program runs (its first line passed on, so the loop is turning)
// still cancels the run: corral exits 128+15 at once, not when the
// program's 30 s sleep would end.
Test(supervisor_start, sigterm_cancels_a_one_run_cli_whose_loop_armed_the_signal_poll_with_its_first_submit) {
  TempDir dir;
  const std::string out_path = dir / "out";
  pid_t pid = start_cli(out_path, {"run", "--tier", "none", "--", "/bin/sh", "-c", "echo started; exec sleep 30"});
  cr_assert_geq(pid, 0);
  for (int tries = 0; tries < 3000 && read_file(out_path).empty(); ++tries) usleep(10000);
  cr_assert_eq(read_file(out_path), "started\n");
  cr_assert_eq(kill(pid, SIGTERM), 0);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status), "corral died of signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  cr_assert_eq(WEXITSTATUS(status), 128 + SIGTERM);
}
