/* bench bwrap: per-run wall time of the CLI `corral run --tier process --
 * /bin/true` (process start included) against bubblewrap running /bin/true
 * in fresh namespaces, interleaved in rounds so drift hits both; medians of
 * the rounds' means. Both with stdin, stdout and stderr on /dev/null.
 *
 *   bwrap_cli CORRAL [ROUNDS=5] [PER_ROUND=20]
 */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "per_run.h"

extern char **environ;

/* Mean ms per run of argv, n times; negative when a run fails. */
static double per_run_ms(char *const argv[], int n) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  for (int fd = 0; fd < 3; fd++) posix_spawn_file_actions_addopen(&fa, fd, "/dev/null", O_RDWR, 0);
  double t0 = now();
  for (int i = 0; i < n; i++) {
    pid_t pid;
    int st;
    if (posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) != 0) return -1;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
  }
  posix_spawn_file_actions_destroy(&fa);
  return (now() - t0) * 1000.0 / n;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bwrap_cli CORRAL [ROUNDS] [PER_ROUND]\n");
    return 2;
  }
  int rounds = argc > 2 ? atoi(argv[2]) : 5, per = argc > 3 ? atoi(argv[3]) : 20;
  const char *bwrap = "/usr/bin/bwrap";
  if (access(bwrap, X_OK) != 0) {
    printf("bench bwrap: skipped (bubblewrap is not installed; scripts/install-deps installs it)\n");
    return 0;
  }
  char *corral[] = {argv[1], "run", "--tier", "process", "--", "/bin/true", NULL};
  char *bw[] = {(char *)bwrap, "--unshare-all", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
                "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin", "--proc", "/proc",
                "--dev", "/dev", "/bin/true", NULL};
  double c[64], b[64];
  if (rounds > 64) rounds = 64;
  per_run_ms(corral, 2); /* warm the page cache for both */
  per_run_ms(bw, 2);
  for (int r = 0; r < rounds; r++) {
    c[r] = per_run_ms(corral, per);
    b[r] = per_run_ms(bw, per);
    if (c[r] < 0 || b[r] < 0) {
      printf("bench bwrap: failed (%s exited non-zero)\n", c[r] < 0 ? "corral run" : "bwrap");
      return 1;
    }
  }
  double cm = median(c, rounds), bm = median(b, rounds);
  printf("bench bwrap corral=%.2f baseline=%.2f ratio=%.2f unit=ms_per_run\n", cm, bm, cm / bm);
  return 0;
}
