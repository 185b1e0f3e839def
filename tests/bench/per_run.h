/* What the CLI benches (bwrap_cli, oneshot) share: the clock and the
 * median of a series of rounds. How each bench starts its commands stays
 * its own (oneshot forks, as a shell would; bwrap_cli posix_spawns), the
 * same way for every series of that bench. */
#ifndef CORRAL_BENCH_PER_RUN_H
#define CORRAL_BENCH_PER_RUN_H

#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of v[0..n) (sorts v). */
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof v[0], cmp_double);
  return v[n / 2];
}

#endif
