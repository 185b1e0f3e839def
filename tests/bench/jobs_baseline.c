/* bench jobs, the baseline: N /bin/true children (or N of the command after
 * "--", looked up in PATH) started with posix_spawnp, P kept in flight (a new
 * one as each is reaped). Prints the jobs per second.
 *
 *   jobs_baseline [N=10000] [P=64] [-- COMMAND [ARGS...]]
 */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 10000;
  long p = argc > 2 ? atol(argv[2]) : 64;
  char *true_argv[] = {"/bin/true", NULL};
  char **child_argv = true_argv;
  for (int i = 1; i < argc; i++)
    if (argv[i][0] == '-' && argv[i][1] == '-' && argv[i][2] == 0 && i + 1 < argc) {
      child_argv = argv + i + 1;
      break;
    }
  long started = 0, done = 0, in_flight = 0;
  double t0 = now();
  while (done < n) {
    while (in_flight < p && started < n) {
      pid_t pid;
      if (posix_spawnp(&pid, child_argv[0], NULL, NULL, child_argv, environ) != 0) {
        perror("posix_spawnp");
        return 1;
      }
      started++;
      in_flight++;
    }
    int status;
    if (waitpid(-1, &status, 0) < 0) {
      perror("waitpid");
      return 1;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "jobs_baseline: a child failed\n");
      return 1;
    }
    done++;
    in_flight--;
  }
  printf("%.1f\n", (double)n / (now() - t0));
  return 0;
}
