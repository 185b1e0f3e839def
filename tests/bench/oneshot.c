/* bench oneshot: per-run wall time of the CLI `corral run --tier none --
 * /bin/true` and `corral run --tier process -- /bin/true` (process start
 * included: what a user's one-shot run costs) against a bare exec of
 * /bin/true started the same way: fork + execv + waitpid from this driver,
 * stdin, stdout and stderr on /dev/null. The three series interleave in
 * rounds so drift on a shared host hits all of them; each series counts
 * the median of its rounds' means (goals, issue 16: none <= 2.5x, process
 * <= 3x).
 *
 *   oneshot CORRAL [ROUNDS=7] [PER_ROUND=30]
 *
 * ONESHOT_LABEL=x names the rows oneshot_none_x and oneshot_process_x.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "per_run.h"

/* Mean ms per run of argv, n times; negative when a run fails. */
static double per_run_ms(char *const argv[], int n) {
  double t0 = now();
  for (int i = 0; i < n; i++) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
      int fd = open("/dev/null", O_RDWR);
      if (fd < 0) _exit(127);
      dup2(fd, 0);
      dup2(fd, 1);
      dup2(fd, 2);
      if (fd > 2) close(fd);
      execv(argv[0], argv);
      _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return -1;
  }
  return (now() - t0) * 1000.0 / n;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: oneshot CORRAL [ROUNDS] [PER_ROUND]\n");
    return 2;
  }
  int rounds = argc > 2 ? atoi(argv[2]) : 7, per = argc > 3 ? atoi(argv[3]) : 30;
  if (rounds < 1) rounds = 1;
  if (rounds > 64) rounds = 64;
  if (per < 1) per = 1;
  char *bare[] = {"/bin/true", NULL};
  char *none[] = {argv[1], "run", "--tier", "none", "--", "/bin/true", NULL};
  char *process[] = {argv[1], "run", "--tier", "process", "--", "/bin/true", NULL};
  double b[64], n[64], p[64];
  /* Warm the page cache and the host probes' caches for every series. */
  if (per_run_ms(bare, 3) < 0 || per_run_ms(none, 3) < 0 || per_run_ms(process, 3) < 0) {
    printf("bench oneshot: failed (a warm-up run exited non-zero)\n");
    return 1;
  }
  for (int r = 0; r < rounds; r++) {
    b[r] = per_run_ms(bare, per);
    n[r] = per_run_ms(none, per);
    p[r] = per_run_ms(process, per);
    if (b[r] < 0 || n[r] < 0 || p[r] < 0) {
      printf("bench oneshot: failed (%s exited non-zero)\n",
             b[r] < 0 ? "/bin/true" : n[r] < 0 ? "corral run --tier none" : "corral run --tier process");
      return 1;
    }
  }
  double bm = median(b, rounds), nm = median(n, rounds), pm = median(p, rounds);
  const char *label = getenv("ONESHOT_LABEL");
  const char *sep = label && *label ? "_" : "";
  if (!label) label = "";
  printf("bench oneshot_none%s%s corral=%.2f baseline=%.2f ratio=%.2f unit=ms_per_run\n", sep, label, nm, bm, nm / bm);
  printf("bench oneshot_process%s%s corral=%.2f baseline=%.2f ratio=%.2f unit=ms_per_run\n", sep, label, pm, bm,
         pm / bm);
  return 0;
}
