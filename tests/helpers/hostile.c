/* hostile: the misbehaving programs corral's tests run, one mode per argv[1].
 *
 *   fork-sleep PIDFILE     fork a background child that writes its pid to PIDFILE, both sleep
 *   secret-halves VAR      print $VAR in two halves with a pause, to stdout and stderr
 *   secret-pieces VAR      for every split k of $VAR: 200 dots and its first k bytes,
 *                          a pause, the rest and a newline (separate writes to stdout)
 *   plant-links HOSTFILE   out/ok.txt, out/passwd -> /etc/passwd, out/hard (hard link to HOSTFILE)
 *   flood BYTES            write BYTES of 'x' to stdout
 *   spin                   burn CPU forever
 *   write-file NAME BYTES  write BYTES to NAME (for file_bytes)
 *   open-many              open /dev/null until it fails; print how many
 *   leave-000              leave d/e/f files with d at mode 000
 *   ignore-term            ignore SIGTERM and sleep
 *   close-stdout           close stdout early and keep running a little
 *   self-stop              stop itself with SIGSTOP
 *   setsid-escape          double fork + setsid; the escapee sleeps holding stdout
 *   sibling MS             clone(CLONE_PARENT): a child of our parent, not ours, that makes a
 *                          session of its own, prints "escapee <pid>" and pauses; we sleep MS
 *   exit CODE              exit with CODE
 *   fork-bomb MAX          fork up to MAX children, print how many succeeded, all exit
 *   fork-chain             a fork rabbit: fork one child and exit; the child makes
 *                          a session of its own (out of a group kill's reach) and
 *                          does the same, forever (a retry when a fork fails);
 *                          prints "chain" first. Extra arguments tag the processes
 *   ipc-make KEY DIR       a SysV shm segment (1 MiB) and message queue with KEY and
 *                          the POSIX queue /corral-KEY, all mode 0666 and left behind;
 *                          "shm=ok msg=ok mq=ok" (or the errno); then DIR/made, and
 *                          wait (up to 20 s) for DIR/done
 *   term-marker DIR        fork a setsid child that writes DIR/child-ready, then on
 *                          SIGTERM writes DIR/child-termed and exits; the program
 *                          itself ignores SIGTERM and pauses (only a SIGKILL ends it)
 *   stop-all MS            SIGSTOP to every process it may signal, as soon as it
 *                          may (kill(-1), then each pid in /proc), in a loop for
 *                          MS milliseconds; then "stopped=N" (the kills of one
 *                          pid that were let through) and "refused=ERRNO" (the
 *                          last refusal, or "none")
 *   ipc-leave KIND KEY     leave one IPC object with KEY, mode 0666, and exit: KIND is
 *                          shm (a segment), msg (a queue), sem (a set of one) or mq
 *                          (the POSIX queue /corral-KEY); "KIND=ok" or the errno
 *   ipc-find KIND KEY      whether that object is there: "KIND=found" or the errno
 *   ipc-id                 make a private SysV segment, print its id, remove it (a
 *                          namespace's first object has id 0; later ones count up)
 *   ipc-look KEY DIR       wait (up to 20 s) for DIR/made; whether KEY's segment and
 *                          queue and /corral-KEY are visible ("shm=found" or the
 *                          errno, e.g. ENOENT); then DIR/done
 *   set-id DIR             try to leave set-user/group-id files in DIR, every way
 *                          a mode is set (chmod, fchmod, fchmodat, fchmodat2, open,
 *                          openat, creat with O_CREAT, O_TMPFILE, mkdir, mknod); one
 *                          line per try, "NAME=" and the errno's name (EPERM) or
 *                          "set"/"clear" (whether the resulting file has S_ISUID or
 *                          S_ISGID); controls (chmod 0755, open 0644, mkdir -p)
 *                          print "ok:MODE" in octal; openat2 its errno or "ok"
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static _Noreturn void fork_sleep(const char *pidfile) {
  pid_t p = fork();
  if (p == 0) {
    FILE *f = fopen(pidfile, "w");
    if (f) { fprintf(f, "%d\n", getpid()); fclose(f); }
    for (;;) pause();
  }
  for (;;) pause();
}

static int secret_halves(const char *var) {
  const char *v = getenv(var);
  if (!v) return 3;
  size_t n = strlen(v), half = n / 2;
  printf("before:%.*s", (int)half, v);
  fflush(stdout);
  fprintf(stderr, "err:%.*s", (int)half, v);
  nap_ms(150);
  printf("%s:after\n", v + half);
  fprintf(stderr, "%s:end\n", v + half);
  return 0;
}

static int write_out(const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(1, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* The pause lets the reader take the first piece on its own, so the
 * secret's start ends one read and its rest begins the next. */
static int secret_pieces(const char *var) {
  const char *v = getenv(var);
  if (!v) return 3;
  size_t n = strlen(v);
  char dots[200];
  memset(dots, '.', sizeof dots);
  for (size_t k = 0; k <= n; k++) {
    if (write_out(dots, sizeof dots) != 0 || write_out(v, k) != 0) return 4;
    nap_ms(20);
    if (write_out(v + k, n - k) != 0 || write_out("\n", 1) != 0) return 4;
  }
  return 0;
}

static int plant_links(const char *hostfile) {
  if (mkdir("out", 0755) != 0 && errno != EEXIST) return 3;
  FILE *f = fopen("out/ok.txt", "w");
  if (!f) return 4;
  fputs("fine\n", f);
  fclose(f);
  if (symlink("/etc/passwd", "out/passwd") != 0) return 5;
  if (link(hostfile, "out/hard") != 0) printf("link failed: %s\n", strerror(errno));
  return 0;
}

static int flood(long long bytes) {
  static char buf[65536];
  memset(buf, 'x', sizeof buf);
  while (bytes > 0) {
    size_t n = bytes < (long long)sizeof buf ? (size_t)bytes : sizeof buf;
    ssize_t w = write(1, buf, n);
    if (w <= 0) return 1;
    bytes -= w;
  }
  return 0;
}

static int write_file(const char *name, long long bytes) {
  int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 3;
  static char buf[4096];
  while (bytes > 0) {
    size_t n = bytes < (long long)sizeof buf ? (size_t)bytes : sizeof buf;
    ssize_t w = write(fd, buf, n);
    if (w <= 0) { printf("write failed: %s\n", strerror(errno)); return 4; }
    bytes -= w;
  }
  return 0;
}

static int open_many(void) {
  int n = 0;
  while (open("/dev/null", O_RDONLY) >= 0) n++;
  printf("opened %d (%s)\n", n, strerror(errno));
  return 0;
}

static int leave_000(void) {
  if (mkdir("d", 0755) || mkdir("d/e", 0755)) return 3;
  FILE *f = fopen("d/e/f", "w");
  if (f) { fputs("x", f); fclose(f); }
  f = fopen("d/g", "w");
  if (f) { fputs("y", f); fclose(f); }
  chmod("d/e", 0);
  chmod("d", 0);
  return 0;
}

static int setsid_escape(void) {
  pid_t p = fork();
  if (p == 0) {
    setsid();
    if (fork() == 0) {
      printf("escapee %d\n", getpid());
      fflush(stdout);
      for (;;) pause();
    }
    _exit(0);
  }
  waitpid(p, NULL, 0);
  nap_ms(100);
  return 0;
}

// Two escapees of the process group, one that made a group of its own
// (setpgid) and one a session (setsid), each printing "escapee <pid>" and
// pausing; then the program itself sleeps `ms` (forever when negative) and
// exits 0. Extra arguments only tag the processes for a /proc scan.
static int escapees(long ms) {
  for (int i = 0; i < 2; i++) {
    pid_t p = fork();
    if (p == 0) {
      if (i == 0) setpgid(0, 0);
      else setsid();
      printf("escapee %d\n", getpid());
      fflush(stdout);
      for (;;) pause();
    }
  }
  if (ms < 0) for (;;) pause();
  nap_ms(ms);
  return 0;
}

// A sibling, not a child: clone(CLONE_PARENT) gives it our parent (the
// thread of the supervisor that cloned us), where no reparenting at our
// exit would bring it; a session of its own puts it out of a group kill.
static int sibling(long ms) {
  long p = syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0);
  if (p == 0) {
    setsid();
    printf("escapee %d\n", getpid());
    fflush(stdout);
    for (;;) pause();
  }
  if (p < 0) {
    perror("clone");
    return 1;
  }
  nap_ms(ms);
  return 0;
}

static _Noreturn void fork_chain(void) {
  printf("chain\n");
  fflush(stdout);
  for (;;) {
    pid_t p = fork();
    if (p > 0) _exit(0);
    if (p == 0) setsid();
  }
}

static int fork_bomb(int max) {
  int ok = 0;
  for (int i = 0; i < max; i++) {
    pid_t p = fork();
    if (p == 0) { nap_ms(500); _exit(0); }
    if (p < 0) break;
    ok++;
  }
  printf("forked %d\n", ok);
  fflush(stdout);
  while (wait(NULL) > 0) {}
  return 0;
}

static void ipc_result(const char *what, int ok, const char *yes) {
  printf("%s=%s\n", what, ok ? yes : strerrorname_np(errno));
}

/* Polls for DIR/NAME every 10 ms, up to 20 s. */
static int wait_for(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  for (int i = 0; i < 2000; i++) {
    if (access(path, F_OK) == 0) return 0;
    nap_ms(10);
  }
  return -1;
}

static void touch(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd >= 0) close(fd);
}

static int ipc_make(key_t key, const char *dir) {
  char name[64];
  snprintf(name, sizeof name, "/corral-%d", (int)key);
  ipc_result("shm", shmget(key, 1 << 20, IPC_CREAT | 0666) >= 0, "ok");
  ipc_result("msg", msgget(key, IPC_CREAT | 0666) >= 0, "ok");
  mqd_t q = mq_open(name, O_CREAT | O_RDWR, 0666, NULL);
  ipc_result("mq", q != (mqd_t)-1, "ok");
  fflush(stdout);
  touch(dir, "made");
  return wait_for(dir, "done") == 0 ? 0 : 1;
}

static int ipc_look(key_t key, const char *dir) {
  char name[64];
  snprintf(name, sizeof name, "/corral-%d", (int)key);
  if (wait_for(dir, "made") != 0) return 1;
  ipc_result("shm", shmget(key, 0, 0) >= 0, "found");
  ipc_result("msg", msgget(key, 0) >= 0, "found");
  mqd_t q = mq_open(name, O_RDONLY);
  ipc_result("mq", q != (mqd_t)-1, "found");
  fflush(stdout);
  touch(dir, "done");
  return 0;
}

/* One kind of IPC object with KEY: made (IPC_CREAT, 0666) or looked up. */
static int ipc_one(const char *kind, key_t key, int make) {
  const int flags = make ? IPC_CREAT | 0666 : 0;
  char name[64];
  snprintf(name, sizeof name, "/corral-%d", (int)key);
  int ok;
  if (!strcmp(kind, "shm")) ok = shmget(key, make ? 4096 : 0, flags) >= 0;
  else if (!strcmp(kind, "msg")) ok = msgget(key, flags) >= 0;
  else if (!strcmp(kind, "sem")) ok = semget(key, make ? 1 : 0, flags) >= 0;
  else if (!strcmp(kind, "mq")) {
    mqd_t q = make ? mq_open(name, O_CREAT | O_RDWR, 0666, NULL) : mq_open(name, O_RDONLY);
    ok = q != (mqd_t)-1;
  } else return 2;
  ipc_result(kind, ok, make ? "ok" : "found");
  return 0;
}

static int stop_all(long ms) {
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  long stopped = 0;
  int refused = 0;
  const pid_t self = getpid();
  do {
    /* kill(-1) is the fastest sweep, but says 0 even when every target
       refused (EPERM): each pid /proc lists is asked on its own as well. */
    (void)kill(-1, SIGSTOP);
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
      pid_t p = (pid_t)atoi(e->d_name);
      if (p <= 1 || p == self) continue;
      if (kill(p, SIGSTOP) == 0) stopped++;
      else if (errno != ESRCH) refused = errno;
    }
    if (d) closedir(d);
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < ms);
  const char *name = refused ? strerrorname_np(refused) : "none";
  printf("stopped=%ld\nrefused=%s\n", stopped, name ? name : "?");
  return 0;
}

static char g_termed[4096];

static void on_term(int sig) {
  (void)sig;
  int fd = open(g_termed, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ssize_t n = write(fd, "TERM\n", 5);
    (void)n;
    close(fd);
  }
  _exit(0);
}

static _Noreturn void term_marker(const char *dir) {
  snprintf(g_termed, sizeof g_termed, "%s/child-termed", dir);
  pid_t p = fork();
  if (p == 0) {
    setsid();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    touch(dir, "child-ready");
    for (;;) pause();
  }
  signal(SIGTERM, SIG_IGN);
  for (;;) pause();
}

/* set-id: what became of one try. A refused call prints its errno's name;
 * one that went through prints whether `path` ended up set-id. */
#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452 /* Linux 6.6; x86_64 and the generic table alike */
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
static const char *errno_name(int e) {
  switch (e) {
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case ENOSYS: return "ENOSYS";
    case EINVAL: return "EINVAL";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    case EEXIST: return "EEXIST";
    default: return "errno";
  }
}
static void set_id_report(const char *name, long ret, int err, const char *path, int fd) {
  struct stat st;
  if (ret < 0) { printf("%s=%s\n", name, errno_name(err)); return; }
  int got = fd >= 0 ? fstat(fd, &st) : lstat(path, &st);
  if (got != 0) { printf("%s=nostat\n", name); return; }
  printf("%s=%s\n", name, (st.st_mode & (S_ISUID | S_ISGID)) ? "set" : "clear");
}
/* A fresh plain file at DIR/NAME, mode 0755. */
static const char *plain_file(char *buf, size_t n, const char *dir, const char *name) {
  snprintf(buf, n, "%s/%s", dir, name);
  unlink(buf);
  int fd = open(buf, O_WRONLY | O_CREAT | O_EXCL, 0755);
  if (fd >= 0) close(fd);
  return buf;
}
static int set_id(const char *dir) {
  char p[4096];
  long r;
  umask(022);
  int dfd = open(dir, O_RDONLY | O_DIRECTORY);
  if (dfd < 0) { printf("dir=%s\n", errno_name(errno)); return 1; }
  /* The controls: ordinary modes still work. */
  plain_file(p, sizeof p, dir, "plain");
  r = chmod(p, 0644);
  struct stat st;
  printf("chmod-0644=%s\n", r == 0 && stat(p, &st) == 0 && (st.st_mode & 07777) == 0644 ? "ok" : errno_name(errno));
  r = chmod(p, 0755);
  printf("chmod-0755=%s\n", r == 0 && stat(p, &st) == 0 && (st.st_mode & 07777) == 0755 ? "ok" : errno_name(errno));
  snprintf(p, sizeof p, "%s/made", dir);
  unlink(p);
  r = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
  printf("open-0644=%s\n", r >= 0 && fstat((int)r, &st) == 0 && (st.st_mode & 07777) == 0644 ? "ok" : errno_name(errno));
  if (r >= 0) close((int)r);
  snprintf(p, sizeof p, "%s/d", dir);
  r = mkdir(p, 0755);
  printf("mkdir-0755=%s\n", r == 0 || errno == EEXIST ? "ok" : errno_name(errno));
  /* Without O_CREAT the mode is ignored: junk there must not refuse (raw:
   * glibc's open passes no mode without O_CREAT). */
  r = syscall(SYS_openat, AT_FDCWD, p, O_RDONLY | O_DIRECTORY, 06777);
  printf("open-junk-mode=%s\n", r >= 0 ? "ok" : errno_name(errno));
  if (r >= 0) close((int)r);

  /* The tries. */
  plain_file(p, sizeof p, dir, "chmod-4755");
  r = chmod(p, 04755);
  set_id_report("chmod-4755", r, errno, p, -1);
  plain_file(p, sizeof p, dir, "chmod-2755");
  r = chmod(p, 02755);
  set_id_report("chmod-2755", r, errno, p, -1);
  plain_file(p, sizeof p, dir, "raw-chmod-6755");
  r = syscall(SYS_chmod, p, 06755);
  set_id_report("raw-chmod-6755", r, errno, p, -1);
  plain_file(p, sizeof p, dir, "fchmod-4755");
  int fd = open(p, O_RDONLY);
  r = fchmod(fd, 04755);
  set_id_report("fchmod-4755", r, errno, p, -1);
  close(fd);
  plain_file(p, sizeof p, dir, "fchmodat-4755");
  r = syscall(SYS_fchmodat, dfd, "fchmodat-4755", 04755);
  set_id_report("fchmodat-4755", r, errno, p, -1);
  plain_file(p, sizeof p, dir, "fchmodat2-2755");
  r = syscall(SYS_fchmodat2, dfd, "fchmodat2-2755", 02755, 0);
  set_id_report("fchmodat2-2755", r, errno, p, -1);
  snprintf(p, sizeof p, "%s/open-4755", dir);
  unlink(p);
  r = open(p, O_WRONLY | O_CREAT | O_EXCL, 04755); /* glibc: openat */
  set_id_report("open-4755", r, errno, p, -1);
  if (r >= 0) close((int)r);
  snprintf(p, sizeof p, "%s/raw-open-4755", dir);
  unlink(p);
  r = syscall(SYS_open, p, O_WRONLY | O_CREAT | O_EXCL, 04755);
  set_id_report("raw-open-4755", r, errno, p, -1);
  if (r >= 0) close((int)r);
  snprintf(p, sizeof p, "%s/creat-2755", dir);
  unlink(p);
  r = syscall(SYS_creat, p, 02755);
  set_id_report("creat-2755", r, errno, p, -1);
  if (r >= 0) close((int)r);
  r = openat(dfd, ".", O_TMPFILE | O_WRONLY, 04755);
  if (r < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    printf("tmpfile-4755=unsupported\n");
  } else {
    set_id_report("tmpfile-4755", r, errno, NULL, (int)r);
    if (r >= 0) close((int)r);
  }
  snprintf(p, sizeof p, "%s/mknod-4755", dir);
  unlink(p);
  r = mknod(p, S_IFREG | 04755, 0);
  set_id_report("mknod-4755", r, errno, p, -1);
  snprintf(p, sizeof p, "%s/mkdir-2755", dir);
  rmdir(p);
  r = mkdir(p, 02755);
  set_id_report("mkdir-2755", r, errno, p, -1);
  /* openat2 carries its mode where seccomp cannot look. */
  struct { unsigned long long flags, mode, resolve; } how = {O_WRONLY | O_CREAT, 04755, 0};
  snprintf(p, sizeof p, "%s/openat2-4755", dir);
  unlink(p);
  r = syscall(SYS_openat2, AT_FDCWD, p, &how, sizeof how);
  set_id_report("openat2-4755", r, errno, p, -1);
  if (r >= 0) close((int)r);
  close(dfd);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  const char *m = argv[1];
  if (!strcmp(m, "fork-sleep") && argc > 2) fork_sleep(argv[2]);
  if (!strcmp(m, "secret-halves") && argc > 2) return secret_halves(argv[2]);
  if (!strcmp(m, "secret-pieces") && argc > 2) return secret_pieces(argv[2]);
  if (!strcmp(m, "plant-links") && argc > 2) return plant_links(argv[2]);
  if (!strcmp(m, "flood") && argc > 2) return flood(atoll(argv[2]));
  if (!strcmp(m, "spin")) for (volatile unsigned long i = 0;; i++) {}
  if (!strcmp(m, "write-file") && argc > 3) return write_file(argv[2], atoll(argv[3]));
  if (!strcmp(m, "open-many")) return open_many();
  if (!strcmp(m, "leave-000")) return leave_000();
  if (!strcmp(m, "ignore-term")) { signal(SIGTERM, SIG_IGN); for (;;) pause(); }
  if (!strcmp(m, "close-stdout")) { close(1); nap_ms(300); return 0; }
  if (!strcmp(m, "self-stop")) { raise(SIGSTOP); return 0; }
  if (!strcmp(m, "setsid-escape")) return setsid_escape();
  if (!strcmp(m, "escapees") && argc > 2) return escapees(atol(argv[2]));
  if (!strcmp(m, "sibling") && argc > 2) return sibling(atol(argv[2]));
  if (!strcmp(m, "exit") && argc > 2) return atoi(argv[2]);
  if (!strcmp(m, "fork-bomb") && argc > 2) return fork_bomb(atoi(argv[2]));
  if (!strcmp(m, "fork-chain")) fork_chain();
  if (!strcmp(m, "ipc-make") && argc > 3) return ipc_make((key_t)atoi(argv[2]), argv[3]);
  if (!strcmp(m, "term-marker") && argc > 2) term_marker(argv[2]);
  if (!strcmp(m, "stop-all") && argc > 2) return stop_all(atol(argv[2]));
  if (!strcmp(m, "ipc-look") && argc > 3) return ipc_look((key_t)atoi(argv[2]), argv[3]);
  if (!strcmp(m, "ipc-leave") && argc > 3) return ipc_one(argv[2], (key_t)atoi(argv[3]), 1);
  if (!strcmp(m, "ipc-find") && argc > 3) return ipc_one(argv[2], (key_t)atoi(argv[3]), 0);
  if (!strcmp(m, "ipc-id")) {
    int id = shmget(IPC_PRIVATE, 4096, 0600);
    printf("%d\n", id);
    return id >= 0 && shmctl(id, IPC_RMID, NULL) == 0 ? 0 : 1;
  }
  if (!strcmp(m, "set-id") && argc > 2) return set_id(argv[2]);
  return 2;
}
