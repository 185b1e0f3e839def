/* memhog: programs that meet a memory ceiling, one mode per argv[1], for the
 * OOM classification tests (tests/oom_test.cpp).
 *
 *   grow              malloc 1 MiB at a time and touch every page, forever
 *                     (until the OOM killer ends it); exits 3 if malloc fails
 *   fork-grow N       fork N children (fewer if fork fails); the parent and
 *                     every child grow as above
 *   touch BYTES       touch BYTES of fresh memory, print "touched", exit 0
 *   touch-kill BYTES  touch BYTES, then SIGKILL itself
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void touch(char *p, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 4096) ((volatile char *)p)[i] = 1;
}

static _Noreturn void grow(void) {
  const size_t chunk = 1 << 20;
  for (;;) {
    char *p = malloc(chunk);
    if (!p) _exit(3);
    touch(p, chunk);
  }
}

static int touch_bytes(const char *arg, int then_kill) {
  size_t bytes = strtoull(arg, NULL, 10);
  char *p = malloc(bytes);
  if (!p) { printf("malloc failed\n"); return 3; }
  touch(p, bytes);
  printf("touched\n");
  fflush(stdout);
  if (then_kill) kill(getpid(), SIGKILL);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "grow") == 0) grow();
  if (argc >= 3 && strcmp(argv[1], "fork-grow") == 0) {
    int n = atoi(argv[2]);
    for (int i = 0; i < n; ++i)
      if (fork() == 0) break;  /* a child grows too, without forking more */
    grow();
  }
  if (argc >= 3 && strcmp(argv[1], "touch") == 0) return touch_bytes(argv[2], 0);
  if (argc >= 3 && strcmp(argv[1], "touch-kill") == 0) return touch_bytes(argv[2], 1);
  fprintf(stderr, "usage: memhog grow | fork-grow N | touch BYTES | touch-kill BYTES\n");
  return 2;
}
