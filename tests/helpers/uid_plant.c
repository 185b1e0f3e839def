/* uid_plant: what a run leaves in the host's shared writable directories for
 * the next run of its uid (uid_sweep_test.cpp), and that next run's look.
 *
 *   plant TAG OTHERDIR [DEPTH]  under /tmp, /var/tmp, /dev/shm, /run/lock and
 *                               OTHERDIR (another user's 1777 directory): a 0600
 *                               file holding "secret-TAG", a fifo, a bound unix
 *                               socket, a symlink to /tmp/cs-TAG-target, a tree,
 *                               a 000 directory, 20,000 files in one directory
 *                               and a DEPTH-deep chain (default 30000); prints
 *                               "planted"
 *   deep TAG DEPTH              only the DEPTH-deep chain /tmp/cs-TAG-deep/d/d/...
 *   look TAG OTHERDIR           prints "found PATH" for each of those names that
 *                               exists, "read PATH" when the secret is readable,
 *                               and "none" when nothing was found
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static char paths[16][512];
static int npaths;

static const char *name(const char *fmt, const char *a, const char *b) {
  snprintf(paths[npaths], sizeof paths[0], fmt, a, b);
  return paths[npaths++];
}

static void names(const char *tag, const char *other) {
  npaths = 0;
  name("/tmp/cs-%s-secret%s", tag, "");    /* 0 */
  name("/tmp/cs-%s-fifo%s", tag, "");      /* 1 */
  name("/tmp/cs-%s-sock%s", tag, "");      /* 2 */
  name("/tmp/cs-%s-link%s", tag, "");      /* 3 */
  name("/tmp/cs-%s-wide%s", tag, "");      /* 4 */
  name("/tmp/cs-%s-deep%s", tag, "");      /* 5 */
  name("/tmp/cs-%s-locked%s", tag, "");    /* 6 */
  name("/var/tmp/cs-%s-d%s", tag, "");     /* 7 */
  name("/dev/shm/cs-%s-y%s", tag, "");     /* 8 */
  name("/run/lock/cs-%s-lock%s", tag, "");  /* 9 */
  name("%s/cs-%s-planted", other, tag);    /* 10 */
  name("%s/cs-%s-dir", other, tag);        /* 11 */
}

static void must(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "uid_plant: %s: %s\n", what, strerror(errno));
    exit(1);
  }
}

static void write_file(const char *path, const char *text, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
  must(fd >= 0, path);
  must(write(fd, text, strlen(text)) == (ssize_t)strlen(text), path);
  close(fd);
}

static void deep(long depth) {
  must(mkdir(paths[5], 0700) == 0, paths[5]);
  int cur = open(paths[5], O_RDONLY | O_DIRECTORY);
  must(cur >= 0, paths[5]);
  for (long i = 0; i < depth; ++i) {
    must(mkdirat(cur, "d", 0700) == 0, "deep mkdir");
    int next = openat(cur, "d", O_RDONLY | O_DIRECTORY);
    must(next >= 0, "deep open");
    close(cur);
    cur = next;
  }
  must(openat(cur, "leaf", O_WRONLY | O_CREAT, 0600) >= 0, "deep leaf");
  close(cur);
}

static void plant(const char *tag, long depth) {
  char buf[600];
  umask(077);
  snprintf(buf, sizeof buf, "secret-%s\n", tag);
  write_file(paths[0], buf, 0600);
  must(mkfifo(paths[1], 0600) == 0, paths[1]);
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  must(strlen(paths[2]) < sizeof sa.sun_path, paths[2]);
  memcpy(sa.sun_path, paths[2], strlen(paths[2]) + 1);
  must(s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof sa) == 0, paths[2]);
  snprintf(buf, sizeof buf, "/tmp/cs-%s-target", tag);
  must(symlink(buf, paths[3]) == 0, paths[3]);
  must(mkdir(paths[4], 0700) == 0, paths[4]);
  int wide = open(paths[4], O_RDONLY | O_DIRECTORY);
  must(wide >= 0, paths[4]);
  for (int i = 0; i < 3000; ++i) {  // more than one getdents buffer holds
    char n[32];
    snprintf(n, sizeof n, "f%d", i);
    int fd = openat(wide, n, O_WRONLY | O_CREAT | O_EXCL, 0600);
    must(fd >= 0, "wide entry");
    close(fd);
  }
  close(wide);
  deep(depth);
  must(mkdir(paths[6], 0700) == 0, paths[6]);
  snprintf(buf, sizeof buf, "%s/inner", paths[6]);
  write_file(buf, "locked\n", 0600);
  must(chmod(paths[6], 0) == 0, paths[6]);
  must(mkdir(paths[7], 0700) == 0, paths[7]);
  snprintf(buf, sizeof buf, "%s/sub", paths[7]);
  must(mkdir(buf, 0700) == 0, buf);
  snprintf(buf, sizeof buf, "%s/sub/f", paths[7]);
  write_file(buf, "tree\n", 0600);
  write_file(paths[8], "shm\n", 0600);
  write_file(paths[9], "lock\n", 0644);
  write_file(paths[10], "planted\n", 0644);
  must(mkdir(paths[11], 0777) == 0, paths[11]);
  must(chmod(paths[11], 01777) == 0, paths[11]);
  snprintf(buf, sizeof buf, "%s/inner", paths[11]);
  write_file(buf, "inner\n", 0600);
  printf("planted\n");
}

static int look(void) {
  int found = 0;
  struct stat st;
  for (int i = 0; i < npaths; ++i)
    if (lstat(paths[i], &st) == 0) {
      printf("found %s\n", paths[i]);
      found = 1;
    }
  FILE *f = fopen(paths[0], "r");
  if (f) {
    printf("read %s\n", paths[0]);
    fclose(f);
  }
  if (!found) printf("none\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: uid_plant plant|look TAG OTHERDIR [DEPTH]\n");
    return 2;
  }
  names(argv[2], argv[3]);
  if (strcmp(argv[1], "plant") == 0) {
    plant(argv[2], argc > 4 ? atol(argv[4]) : 30000);
    return 0;
  }
  if (strcmp(argv[1], "deep") == 0) {
    deep(atol(argv[3]));
    printf("planted\n");
    return 0;
  }
  if (strcmp(argv[1], "look") == 0) return look();
  return 2;
}
