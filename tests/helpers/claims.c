/* claims: programs that show whether a tier's declared capabilities hold,
 * one mode per argv[1] (tests/tier_claims_test.cpp stages it into the
 * workspace, so it runs in every tier, a container's mount tree included).
 *
 *   tree-alloc K MIB   fork K children; each touches MIB MiB and reports;
 *                      all hold their memory until every one has reported;
 *                      prints "held K x MIB MiB" (exit 0) or "child failed" (1)
 *   connect PORT       TCP connect to 127.0.0.1:PORT; "connected" (0) or
 *                      "connect: <error>" (1)
 *   udp                create an AF_INET datagram socket; "udp socket" (0)
 *                      or "udp: <error>" (1)
 *   tick               "first", a 400 ms pause, "second"
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int tree_alloc(int children, long mib) {
  int report[2], release[2];
  if (pipe(report) != 0 || pipe(release) != 0) return 3;
  for (int i = 0; i < children; i++) {
    pid_t p = fork();
    if (p < 0) {
      printf("child failed: fork: %s\n", strerror(errno));
      return 1;
    }
    if (p == 0) {
      close(report[0]);
      close(release[1]);
      size_t bytes = (size_t)mib << 20;
      char *block = malloc(bytes);
      if (!block) _exit(4);
      memset(block, 1, bytes); /* touched: resident, not just reserved */
      if (write(report[1], "k", 1) != 1) _exit(5);
      char c;
      while (read(release[0], &c, 1) > 0) {}
      _exit(block[bytes - 1] == 1 ? 0 : 6);
    }
  }
  close(report[1]);
  close(release[0]);
  int held = 0;
  char c;
  while (held < children && read(report[0], &c, 1) == 1) held++;
  close(release[1]);
  while (wait(NULL) > 0) {}
  if (held < children) {
    printf("child failed: %d of %d held their memory\n", held, children);
    return 1;
  }
  printf("held %d x %ld MiB\n", children, mib);
  return 0;
}

static int tcp_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    printf("connect: socket: %s\n", strerror(errno));
    return 1;
  }
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((unsigned short)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    printf("connect: %s\n", strerror(errno));
    return 1;
  }
  printf("connected\n");
  return 0;
}

static int udp(void) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) {
    printf("udp: %s\n", strerror(errno));
    return 1;
  }
  printf("udp socket\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  const char *m = argv[1];
  if (!strcmp(m, "tree-alloc") && argc > 3) return tree_alloc(atoi(argv[2]), atol(argv[3]));
  if (!strcmp(m, "connect") && argc > 2) return tcp_connect(atoi(argv[2]));
  if (!strcmp(m, "udp")) return udp();
  if (!strcmp(m, "tick")) {
    printf("first\n");
    fflush(stdout);
    struct timespec ts = {0, 400 * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
    printf("second\n");
    return 0;
  }
  return 2;
}
