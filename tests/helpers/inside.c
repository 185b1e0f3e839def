/* inside: what a program sees from inside a sandbox, one mode per argv[1].
 * Prints "key=value" lines; a failed call prints its errno name.
 *
 *   observe PORT      ids, capabilities, no_new_privs, /proc pids, network
 *                     devices, a TCP connect to 127.0.0.1:PORT, writes to
 *                     /usr /etc /tmp /workspace, /root /home visibility,
 *                     unshare, mount, io_uring_setup, hostname
 *   alloc BYTES       allocate BYTES and touch every page; print "allocated"
 *   write FILE TEXT   write TEXT to FILE (created 0644)
 *   exit CODE         exit with CODE (128+N codes too: pid 1 must not confuse them)
 *   abstract-listen NAME SECONDS
 *                     listen on the abstract unix socket @NAME, print
 *                     "self_connect=" (a connect from this run) and
 *                     "listening", then accept for SECONDS
 *   abstract-connect NAME SECONDS
 *                     connect to @NAME, retrying while nothing listens
 *                     (ECONNREFUSED) for up to SECONDS; "abstract_connect="
 *   ns                "netns=" and "mntns=": this process's namespaces
 *   pid1-reach SECONDS
 *                     open /proc/1/mem and /proc/1/environ, retrying every
 *                     20 ms for up to SECONDS (the host changes pid 1's
 *                     side meanwhile): "pid1_mem=ok" at the first open that
 *                     succeeds, else the last errno; the same for environ
 *   cmdline-watch MARK SECONDS
 *                     read /proc/PID/cmdline of every other process listed
 *                     in /proc, again and again for up to SECONDS:
 *                     "cmdline_seen=PID" at the first that holds MARK, else
 *                     "cmdline_seen=none"; "pids_listed=N" the most other
 *                     pids one scan listed
 *   cwd-root          whether the working directory lies under this process's
 *                     root: "cwd_in_root=yes" when walking ".." from it
 *                     reaches "/", "no" when it reaches another top (a
 *                     directory outside, whose ".." is itself)
 *   families          socket(2) for each family a sandbox may or may not
 *                     allow ("unix=ok", "vsock=EACCES", ...) and
 *                     socketpair(2) for AF_UNIX, AF_INET and AF_TIPC
 */
#include <sys/un.h>
#include <time.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *err_name(int e) {
  const char *n = strerrorname_np(e);
  return n ? n : "E?";
}

static void result(const char *key, int rc) { printf("%s=%s\n", key, rc == 0 ? "ok" : err_name(errno)); }

static void status_field(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  size_t n = strlen(field);
  while (f && fgets(line, sizeof line, f)) {
    if (strncmp(line, field, n) == 0 && line[n] == ':') {
      char *v = line + n + 1;
      while (*v == '\t' || *v == ' ') v++;
      v[strcspn(v, "\n")] = 0;
      printf("%s=%s\n", field, v);
    }
  }
  if (f) fclose(f);
}

/* Sorted numeric entries of /proc, comma-separated. */
static void proc_pids(void) {
  int pids[64], n = 0;
  DIR *d = opendir("/proc");
  struct dirent *e;
  while (d && (e = readdir(d)) && n < 64)
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') pids[n++] = atoi(e->d_name);
  if (d) closedir(d);
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (pids[j] < pids[i]) { int t = pids[i]; pids[i] = pids[j]; pids[j] = t; }
  printf("proc_pids=");
  for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", pids[i]);
  printf("\n");
}

/* Interface names from /proc/net/dev, comma-separated. */
static void net_devices(void) {
  FILE *f = fopen("/proc/net/dev", "r");
  char line[512];
  int first = 1;
  printf("net_devices=");
  while (f && fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (!colon) continue;
    *colon = 0;
    char *name = line;
    while (*name == ' ') name++;
    printf("%s%s", first ? "" : ",", name);
    first = 0;
  }
  printf("\n");
  if (f) fclose(f);
}

static void try_connect(int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) { result("connect", -1); return; }
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((unsigned short)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  result("connect", connect(s, (struct sockaddr *)&a, sizeof a));
  close(s);
}

static void try_write(const char *key, const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) { close(fd); unlink(path); }
  result(key, fd < 0 ? -1 : 0);
}

static void visible(const char *key, const char *path) {
  struct stat st;
  result(key, stat(path, &st));
}

// Whether the file opens for reading (pid 1's maps, environ and memory:
// the kernel's ptrace access check decides).
static void readable(const char *key, const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) close(fd);
  result(key, fd < 0 ? -1 : 0);
}

static int observe(int port) {
  printf("uid=%d\ngid=%d\n", (int)getuid(), (int)getgid());
  status_field("CapEff");
  status_field("CapBnd");
  status_field("CapPrm");
  status_field("CapAmb");
  status_field("NoNewPrivs");
  status_field("Seccomp");
  status_field("Groups");
  proc_pids();
  net_devices();
  try_connect(port);
  try_write("write_usr", "/usr/corral-probe");
  try_write("write_etc", "/etc/corral-probe");
  try_write("write_root", "/corral-probe");
  try_write("write_tmp", "/tmp/corral-probe");
  try_write("write_workspace", "/workspace/corral-probe");
  visible("see_root_home", "/root");
  visible("see_home", "/home");
  visible("see_sys", "/sys/class/net");
  readable("read_pid1_maps", "/proc/1/maps");
  readable("read_pid1_environ", "/proc/1/environ");
  readable("read_pid1_mem", "/proc/1/mem");
  result("unshare_user", unshare(CLONE_NEWUSER));
  result("unshare_ns", unshare(CLONE_NEWNS));
  result("mount", mount("tmpfs", "/tmp", "tmpfs", 0, NULL));
  long ring = syscall(SYS_io_uring_setup, 1, NULL);
  result("io_uring_setup", ring >= 0 ? 0 : (errno == EFAULT ? 0 : -1));
  char host[128] = "";
  gethostname(host, sizeof host);
  char cwd[256] = "";
  if (!getcwd(cwd, sizeof cwd)) strcpy(cwd, "?");
  printf("hostname=%s\ncwd=%s\n", host, cwd);
  return 0;
}

static int alloc(long long bytes) {
  char *p = malloc((size_t)bytes);
  if (!p) { printf("malloc failed\n"); return 3; }
  for (long long i = 0; i < bytes; i += 4096) p[i] = 1;
  printf("allocated\n");
  return 0;
}

static int write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) { printf("open %s: %s\n", path, err_name(errno)); return 3; }
  fputs(text, f);
  return fclose(f) == 0 ? 0 : 4;
}

static int abstract_socket(const char *name, struct sockaddr_un *a, socklen_t *len) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  size_t n = strlen(name);
  if (n > sizeof a->sun_path - 2) n = sizeof a->sun_path - 2;
  memcpy(a->sun_path + 1, name, n);  /* sun_path[0] = 0: abstract */
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
  return socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
}

static int abstract_listen(const char *name, int seconds) {
  struct sockaddr_un a;
  socklen_t len;
  int s = abstract_socket(name, &a, &len);
  if (s < 0 || bind(s, (struct sockaddr *)&a, len) != 0 || listen(s, 8) != 0) {
    printf("listen: %s\n", err_name(errno));
    return 3;
  }
  int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  result("self_connect", connect(c, (struct sockaddr *)&a, len));
  close(c);
  printf("listening\n");
  alarm((unsigned)seconds);
  for (;;) {
    int fd = accept(s, NULL, NULL);
    if (fd >= 0) close(fd);
  }
}

static int abstract_connect(const char *name, int seconds) {
  struct sockaddr_un a;
  socklen_t len;
  struct timespec pause = {0, 50 * 1000 * 1000};
  for (int i = 0;; i++) {
    int s = abstract_socket(name, &a, &len);
    int r = connect(s, (struct sockaddr *)&a, len);
    int e = errno;
    close(s);
    if (r == 0 || e != ECONNREFUSED || i >= seconds * 20) {
      errno = e;
      result("abstract_connect", r);
      return 0;
    }
    nanosleep(&pause, NULL);
  }
}

/* One socket(2) per family, closed at once; the errno when refused. The
 * families the tests name: what every network policy allows (unix), what
 * only some allow (inet, netlink) and what none does (the rest; a family
 * this kernel lacks fails with EAFNOSUPPORT unless a filter refuses it). */
static int families(void) {
  static const struct { const char *name; int domain, type, protocol; } fams[] = {
      {"unix", AF_UNIX, SOCK_STREAM, 0},      {"inet", AF_INET, SOCK_DGRAM, 0},
      {"inet6", AF_INET6, SOCK_DGRAM, 0},     {"netlink", AF_NETLINK, SOCK_RAW, 0},
      {"packet", AF_PACKET, SOCK_RAW, 0},     {"vsock", AF_VSOCK, SOCK_STREAM, 0},
      {"alg", AF_ALG, SOCK_SEQPACKET, 0},     {"bluetooth", AF_BLUETOOTH, SOCK_STREAM, 3},
      {"key", AF_KEY, SOCK_RAW, 2},           {"xdp", AF_XDP, SOCK_RAW, 0},
  };
  for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++) {
    int s = socket(fams[i].domain, fams[i].type | SOCK_CLOEXEC, fams[i].protocol);
    int e = errno;
    if (s >= 0) close(s);
    errno = e;
    result(fams[i].name, s >= 0 ? 0 : -1);
  }
  static const struct { const char *name; int domain; } pairs[] = {
      {"socketpair_unix", AF_UNIX}, {"socketpair_inet", AF_INET}, {"socketpair_tipc", AF_TIPC}};
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    int sv[2];
    int r = socketpair(pairs[i].domain, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv);
    int e = errno;
    if (r == 0) close(sv[0]), close(sv[1]);
    errno = e;
    result(pairs[i].name, r);
  }
  return 0;
}

static int pid1_reach(double seconds) {
  static const char *const keys[] = {"pid1_mem", "pid1_environ"};
  static const char *const paths[] = {"/proc/1/mem", "/proc/1/environ"};
  int err[2] = {0, 0}, opened[2] = {0, 0};
  struct timespec start, now, nap = {0, 20 * 1000000L};
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    for (int i = 0; i < 2; i++) {
      if (opened[i]) continue;
      int fd = open(paths[i], O_RDONLY | O_CLOEXEC);
      if (fd >= 0) close(fd), opened[i] = 1;
      else err[i] = errno;
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((opened[0] && opened[1]) ||
        (double)(now.tv_sec - start.tv_sec) + (double)(now.tv_nsec - start.tv_nsec) / 1e9 >= seconds)
      break;
    nanosleep(&nap, NULL);
  }
  for (int i = 0; i < 2; i++) printf("%s=%s\n", keys[i], opened[i] ? "ok" : err_name(err[i]));
  return 0;
}

static int cmdline_has(int pid, const char *mark) {
  char path[64], buf[8192];
  snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf);
  close(fd);
  return n > 0 && memmem(buf, (size_t)n, mark, strlen(mark)) != NULL;
}

static int cmdline_watch(const char *mark, double seconds) {
  struct timespec start, now;
  int most = 0, self = getpid();
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    DIR *d = opendir("/proc");
    struct dirent *e;
    int listed = 0;
    while (d && (e = readdir(d))) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      int pid = atoi(e->d_name);
      if (pid == self) continue;
      listed++;
      if (cmdline_has(pid, mark)) {
        closedir(d);
        printf("cmdline_seen=%d\npids_listed=%d\n", pid, listed > most ? listed : most);
        return 0;
      }
    }
    if (d) closedir(d);
    if (listed > most) most = listed;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((double)(now.tv_sec - start.tv_sec) + (double)(now.tv_nsec - start.tv_nsec) / 1e9 >= seconds) break;
  }
  printf("cmdline_seen=none\npids_listed=%d\n", most);
  return 0;
}

static int cwd_root(void) {
  struct stat root, here, up;
  char path[4096] = ".";
  if (stat("/", &root) != 0) return 1;
  for (int depth = 0; depth < 256 && strlen(path) + 4 < sizeof path; depth++) {
    if (stat(path, &here) != 0) break;
    if (here.st_dev == root.st_dev && here.st_ino == root.st_ino) return printf("cwd_in_root=yes\n"), 0;
    strcat(path, "/..");
    if (stat(path, &up) != 0) break;
    if (up.st_dev == here.st_dev && up.st_ino == here.st_ino) return printf("cwd_in_root=no\n"), 0;
  }
  printf("cwd_in_root=%s\n", err_name(errno));
  return 0;
}

static void ns_link(const char *key, const char *path) {
  char buf[128];
  ssize_t n = readlink(path, buf, sizeof buf - 1);
  buf[n > 0 ? n : 0] = 0;
  printf("%s=%s\n", key, buf);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) return 2;
  const char *m = argv[1];
  if (!strcmp(m, "observe") && argc > 2) return observe(atoi(argv[2]));
  if (!strcmp(m, "alloc") && argc > 2) return alloc(atoll(argv[2]));
  if (!strcmp(m, "write") && argc > 3) return write_text(argv[2], argv[3]);
  if (!strcmp(m, "exit") && argc > 2) return atoi(argv[2]);
  if (!strcmp(m, "abstract-listen") && argc > 3) return abstract_listen(argv[2], atoi(argv[3]));
  if (!strcmp(m, "abstract-connect") && argc > 3) return abstract_connect(argv[2], atoi(argv[3]));
  if (!strcmp(m, "families")) return families();
  if (!strcmp(m, "cwd-root")) return cwd_root();
  if (!strcmp(m, "cmdline-watch") && argc > 3) return cmdline_watch(argv[2], atof(argv[3]));
  if (!strcmp(m, "pid1-reach") && argc > 2) return pid1_reach(atof(argv[2]));
  if (!strcmp(m, "ns")) {
    ns_link("netns", "/proc/self/ns/net");
    ns_link("mntns", "/proc/self/ns/mnt");
    return 0;
  }
  return 2;
}
