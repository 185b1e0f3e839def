/* compat: what an ordinary program expects of its environment, one mode per
 * argv[1]. Prints "key=value" lines; a failed call prints its errno name.
 *
 *   pty               posix_openpt/grantpt/unlockpt, the slave opened and a
 *                     line written to the master read back from it ("pty=");
 *                     /dev/tty without a controlling terminal ("tty_no_ctty=",
 *                     ENXIO expected) and in a child whose terminal is the pty
 *                     ("tty_with_pty=")
 *   files PATH...     for each PATH "PATH=ok" when it can be opened for reading
 *   whoami            getpwuid(getuid()) ("pw_name=", "pw_dir="), getgrgid,
 *                     and the USER, LOGNAME and HOME variables
 *   loopback          an AF_INET socket bound to 127.0.0.1, listened on,
 *                     connected to and a byte sent through it: "socket=",
 *                     "bind=", "connect=", "roundtrip="
 *   semaphore         sem_open of a new named POSIX semaphore (/dev/shm), as
 *                     Python's multiprocessing locks do: "sem_open="
 *   int80             getpid through the 32-bit int 0x80 entry: "int80=ok"
 *   sockets N         socket(AF_INET, SOCK_STREAM) N times: "socket_eacces=K"
 *                     (how many failed with EACCES) and "socket_other=" the
 *                     errno of the first that did not ("-" when none)
 *   shm-write NAME [S] create /dev/shm/NAME and write to it: "shm_write=";
 *                     then stay S seconds (default 0) holding it
 *   shm-look NAME     whether /dev/shm/NAME exists: "shm_look=" ok or ENOENT
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *err_name(int e) {
  const char *n = strerrorname_np(e);
  return n ? n : "E?";
}

static void result(const char *key, int rc) { printf("%s=%s\n", key, rc == 0 ? "ok" : err_name(errno)); }

static int pty(void) {
  int tty = open("/dev/tty", O_RDWR | O_NOCTTY);
  result("tty_no_ctty", tty >= 0 ? 0 : -1);
  if (tty >= 0) close(tty);

  int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) {
    result("pty", -1);
    return 0;
  }
  const char *name = ptsname(master);
  int slave = name ? open(name, O_RDWR | O_NOCTTY) : -1;
  if (slave < 0) {
    result("pty", -1);
    return 0;
  }
  printf("pty_name=%s\n", name);
  char buf[64] = {0};
  if (write(master, "ping\n", 5) != 5 || read(slave, buf, sizeof buf - 1) <= 0) {
    result("pty", -1);
    return 0;
  }
  errno = EIO;
  result("pty", strncmp(buf, "ping", 4) == 0 ? 0 : -1);

  // A child in a session of its own whose terminal is the slave: /dev/tty
  // is that pty, and what it writes there reaches the master. The child
  // stays until the master has read: a session leader's exit hangs up its
  // terminal, which may drop the line before the master reads it.
  int hold[2];
  if (pipe(hold) != 0) {
    result("tty_with_pty", -1);
    return 0;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(hold[1]);
    if (setsid() < 0 || ioctl(slave, TIOCSCTTY, 0) != 0) _exit(1);
    int t = open("/dev/tty", O_WRONLY);
    if (t < 0) _exit(2);
    int wrote = write(t, "pong\n", 5) == 5;
    char c;
    (void)!read(hold[0], &c, 1);
    _exit(wrote ? 0 : 3);
  }
  close(hold[0]);
  // The master first reads the echo of "ping"; what comes after it is the
  // child's line.
  memset(buf, 0, sizeof buf);
  size_t got = 0;
  ssize_t n = -1;
  struct pollfd p = {.fd = master, .events = POLLIN};
  while (got < sizeof buf - 1 && !strstr(buf, "pong") && poll(&p, 1, 10000) == 1) {
    n = read(master, buf + got, sizeof buf - 1 - got);
    if (n <= 0) break;
    got += (size_t)n;
  }
  n = strstr(buf, "pong") ? (ssize_t)got : -1;
  close(hold[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) n = -1;
  if (n > 0 && strstr(buf, "pong")) {
    puts("tty_with_pty=ok");
  } else {
    printf("tty_with_pty=child exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  return 0;
}

static int files(int argc, char **argv) {
  for (int i = 2; i < argc; i++) {
    int fd = open(argv[i], O_RDONLY | O_CLOEXEC);
    result(argv[i], fd >= 0 ? 0 : -1);
    if (fd >= 0) close(fd);
  }
  return 0;
}

static int whoami(void) {
  errno = ENOENT;
  struct passwd *pw = getpwuid(getuid());
  printf("pw_name=%s\n", pw ? pw->pw_name : err_name(errno));
  printf("pw_dir=%s\n", pw ? pw->pw_dir : "-");
  struct group *gr = getgrgid(getgid());
  printf("gr_name=%s\n", gr ? gr->gr_name : "-");
  const char *vars[] = {"USER", "LOGNAME", "HOME"};
  for (int i = 0; i < 3; i++) printf("%s=%s\n", vars[i], getenv(vars[i]) ? getenv(vars[i]) : "-");
  return 0;
}

static int loopback(void) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  result("socket", s >= 0 ? 0 : -1);
  if (s < 0) return 0;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int r = bind(s, (struct sockaddr *)&a, sizeof a);
  result("bind", r);
  if (r == 0) r = listen(s, 1) == 0 && getsockname(s, (struct sockaddr *)&a, &len) == 0 ? 0 : -1;
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (r != 0) a.sin_port = htons(9);  // nothing bound: connect says what the network does
  int rc = connect(c, (struct sockaddr *)&a, sizeof a);
  result("connect", rc);
  if (r == 0 && rc == 0) {
    int peer = accept(s, NULL, NULL);
    char ch = 0;
    errno = EIO;
    result("roundtrip", peer >= 0 && write(c, "x", 1) == 1 && read(peer, &ch, 1) == 1 && ch == 'x' ? 0 : -1);
  }
  return 0;
}

static int semaphore(void) {
  char name[64];
  snprintf(name, sizeof name, "/corral-compat-%d", (int)getpid());
  sem_t *sem = sem_open(name, O_CREAT | O_EXCL, 0600, 1);
  result("sem_open", sem == SEM_FAILED ? -1 : 0);
  if (sem != SEM_FAILED) {
    sem_close(sem);
    sem_unlink(name);
  }
  return 0;
}

static int int80(void) {
  long ret;
  /* eax 20: getpid in the i386 table. */
  __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory");
  printf("int80=%s\n", ret == getpid() ? "ok" : "wrong");
  return 0;
}

static int sockets(long n) {
  long eacces = 0;
  int other = 0;
  for (long i = 0; i < n; i++) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s >= 0) {
      close(s);
      if (!other) other = -1;
    } else if (errno == EACCES) {
      eacces++;
    } else if (!other) {
      other = errno;
    }
  }
  printf("socket_eacces=%ld\nsocket_other=%s\n", eacces, other == 0 ? "-" : other < 0 ? "made" : err_name(other));
  return 0;
}

static int shm_write(const char *name, int seconds) {
  char path[256];
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  int rc = fd >= 0 && write(fd, "shared\n", 7) == 7 ? 0 : -1;
  result("shm_write", rc);
  if (fd >= 0) close(fd);
  if (seconds > 0) sleep((unsigned)seconds);
  return 0;
}

static int shm_look(const char *name) {
  char path[256];
  snprintf(path, sizeof path, "/dev/shm/%s", name);
  result("shm_look", access(path, F_OK));
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) return 2;
  const char *m = argv[1];
  if (!strcmp(m, "pty")) return pty();
  if (!strcmp(m, "files")) return files(argc, argv);
  if (!strcmp(m, "whoami")) return whoami();
  if (!strcmp(m, "loopback")) return loopback();
  if (!strcmp(m, "semaphore")) return semaphore();
  if (!strcmp(m, "int80")) return int80();
  if (!strcmp(m, "sockets") && argc > 2) return sockets(atol(argv[2]));
  if (!strcmp(m, "shm-write") && argc > 2) return shm_write(argv[2], argc > 3 ? atoi(argv[3]) : 0);
  if (!strcmp(m, "shm-look") && argc > 2) return shm_look(argv[2]);
  return 2;
}
