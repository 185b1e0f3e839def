/* bench capture, the child: writes "token=$CORRAL_BENCH_SECRET\n" (when the
 * variable is set) and then BYTES of English-like text in 64 KiB writes.
 * The text is full of the secret's first letter, so a masker has partial
 * matches to rule out all the way through.
 *
 *   gib_writer BYTES
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int write_all(const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(1, p, n);
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

int main(int argc, char **argv) {
  long long bytes = argc > 1 ? atoll(argv[1]) : 1LL << 30;
  const char *secret = getenv("CORRAL_BENCH_SECRET");
  if (secret) {
    char head[256];
    int n = snprintf(head, sizeof head, "token=%s\n", secret);
    if (n > 0 && write_all(head, (size_t)n) != 0) return 1;
  }
  static char buf[65536];
  static const char text[] = "the harbour held a hundred hulls; she hashed each hash twice and hummed.\n";
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = text[i % (sizeof text - 1)];
  while (bytes > 0) {
    size_t n = bytes < (long long)sizeof buf ? (size_t)bytes : sizeof buf;
    if (write_all(buf, n) != 0) return 1;
    bytes -= (long long)n;
  }
  return 0;
}
