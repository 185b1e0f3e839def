/* c_preexec.c: corral's C ABI in a C program that already forks and execs
 * its children (a job server, a CI agent, a grader): fork, confine, exec.
 *
 * What it shows. Everything that allocates or can fail slowly happens in
 * the parent before fork(): the seccomp filter is compiled
 * (corral_seccomp_prepare), the program's path is resolved, the rlimit
 * table and the write set are built. The child then calls only corral's
 * async-signal-safe apply functions, in the order corral(3) gives, and
 * execs:
 *   1. corral_apply_rlimits      RLIMIT_NOFILE capped, core dumps off
 *   2. corral_confine_writes     Landlock: writes only beneath the --write
 *                                directories and /dev/null
 *   3. corral_drop_privileges    only with --uid (root): setgroups, setresgid,
 *                                setresuid, verified
 *   4. corral_drop_capabilities  every capability, no_new_privs
 *   5. corral_seccomp_apply      the "default" deny-list (+ "no-network")
 * A step that fails never execs an unconfined program: the child writes
 * {step, errno} to a close-on-exec pipe and _exit()s; the parent reports it.
 * The parent then reports how the child ended and exits with its status.
 *
 * Build and run against an installed corral:
 *   cc -o c_preexec c_preexec.c $(pkg-config --cflags --libs corral)
 *   mkdir -p /tmp/work
 *   ./c_preexec --write /tmp/work -- sh -c 'echo ok > /tmp/work/in; echo no > /tmp/out'
 *
 * Options: --write DIR  (repeatable, up to 16; default: the current directory)
 *          --nofile N   (RLIMIT_NOFILE soft and hard; default: 64)
 *          --uid UID    (run as uid and gid UID; needs root; default: keep ours)
 *          --no-network (socket() only for AF_UNIX)
 * Exit: the program's own; 128+N when signal N ended it; 125 when a
 * confinement step failed; 127 when the program could not be executed;
 * 2 on a usage error.
 */
#define _GNU_SOURCE
#include <corral/corral.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

enum step { STEP_RLIMITS, STEP_CONFINE, STEP_PRIVILEGES, STEP_CAPABILITIES, STEP_SECCOMP, STEP_EXEC };
static const char *const step_names[] = {"corral_apply_rlimits", "corral_confine_writes",
                                         "corral_drop_privileges", "corral_drop_capabilities",
                                         "corral_seccomp_apply", "execv"};

struct failure { int step; int err; };

/* The child between fork and exec: raw system calls only (corral's apply
 * functions, write, _exit, execv). `report` is the pipe's write end. */
static void confine_and_exec(int report, const struct corral_rlimit *limits, size_t nlimits,
                             const char *const *writable, size_t nwritable, long uid,
                             const struct corral_seccomp *filter, const char *path,
                             char *const argv[]) {
  struct failure f = {STEP_RLIMITS, 0};
  int rc = corral_apply_rlimits(limits, nlimits);
  if (rc == 0) { f.step = STEP_CONFINE; rc = corral_confine_writes(writable, nwritable); }
  if (rc == 0 && uid >= 0) { f.step = STEP_PRIVILEGES; rc = corral_drop_privileges((uid_t)uid, (gid_t)uid); }
  if (rc == 0) { f.step = STEP_CAPABILITIES; rc = corral_drop_capabilities(); }
  if (rc == 0) { f.step = STEP_SECCOMP; rc = corral_seccomp_apply(filter); }
  if (rc == 0) {
    f.step = STEP_EXEC;
    execv(path, argv);
    rc = -errno;
  }
  f.err = -rc;
  ssize_t unused = write(report, &f, sizeof f);
  (void)unused;
  _exit(f.step == STEP_EXEC ? 127 : 125);
}

/* execvp's search, done in the parent: the child must not allocate. */
static char *resolve(const char *name) {
  if (strchr(name, '/')) return access(name, X_OK) == 0 ? strdup(name) : NULL;
  const char *path = getenv("PATH");
  if (!path) path = "/usr/bin:/bin";
  for (const char *p = path; *p;) {
    size_t len = strcspn(p, ":");
    char *candidate = NULL;
    if (len > 0 && asprintf(&candidate, "%.*s/%s", (int)len, p, name) >= 0) {
      if (access(candidate, X_OK) == 0) return candidate;
      free(candidate);
    }
    p += len + (p[len] == ':');
  }
  return NULL;
}

static int usage(void) {
  fprintf(stderr, "usage: c_preexec [--write DIR]... [--nofile N] [--uid UID] [--no-network] -- PROGRAM [ARGS...]\n");
  return 2;
}

int main(int argc, char **argv) {
  const char *writable[17];
  size_t nwritable = 0;
  unsigned long nofile = 64;
  long uid = -1;
  const char *profile = "default";
  int i = 1;
  for (; i < argc && strcmp(argv[i], "--") != 0; ++i) {
    if (strcmp(argv[i], "--no-network") == 0) { profile = "default,no-network"; continue; }
    if (i + 1 >= argc) return usage();
    char *end = NULL;
    if (strcmp(argv[i], "--write") == 0 && nwritable < 16) writable[nwritable++] = argv[++i];
    else if (strcmp(argv[i], "--nofile") == 0) { nofile = strtoul(argv[++i], &end, 10); if (*end || !nofile) return usage(); }
    else if (strcmp(argv[i], "--uid") == 0) { uid = strtol(argv[++i], &end, 10); if (*end || uid < 1) return usage(); }
    else return usage();
  }
  if (i + 1 >= argc) return usage();
  char **child_argv = argv + i + 1;
  if (nwritable == 0) writable[nwritable++] = ".";
  writable[nwritable++] = "/dev/null";  /* shells open it for writing (2>/dev/null) */

  /* Parent side: everything that allocates or may fail slowly. */
  char *path = resolve(child_argv[0]);
  if (!path) { fprintf(stderr, "c_preexec: %s: not found or not executable\n", child_argv[0]); return 127; }
  struct corral_seccomp *filter = NULL;
  int rc = corral_seccomp_prepare(profile, &filter);
  if (rc != 0) { fprintf(stderr, "c_preexec: corral_seccomp_prepare(\"%s\"): %s\n", profile, strerror(-rc)); return 125; }
  struct corral_rlimit limits[] = {{RLIMIT_NOFILE, nofile, nofile}, {RLIMIT_CORE, 0, 0}};
  fprintf(stderr, "c_preexec: corral %s, landlock ABI %d, seccomp '%s', RLIMIT_NOFILE %lu\n",
          corral_version(), corral_landlock_abi(), profile, nofile);

  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) { perror("c_preexec: pipe2"); return 125; }
  fflush(NULL);  /* nothing buffered may be written twice by the child */
  pid_t pid = fork();
  if (pid < 0) { perror("c_preexec: fork"); return 125; }
  if (pid == 0) {
    close(report[0]);
    confine_and_exec(report[1], limits, sizeof limits / sizeof limits[0], writable, nwritable, uid, filter,
                     path, child_argv);
  }
  close(report[1]);
  corral_seccomp_free(filter);
  free(path);

  /* EOF without a record: exec succeeded and closed the pipe. */
  struct failure f;
  ssize_t n;
  do n = read(report[0], &f, sizeof f); while (n < 0 && errno == EINTR);
  close(report[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) { perror("c_preexec: waitpid"); return 125; }
  }
  if (n == (ssize_t)sizeof f) {
    fprintf(stderr, "c_preexec: child %d: %s failed: %s\n", (int)pid, step_names[f.step], strerror(f.err));
    return f.step == STEP_EXEC ? 127 : 125;
  }
  if (WIFEXITED(status)) {
    fprintf(stderr, "c_preexec: child %d exited with status %d\n", (int)pid, WEXITSTATUS(status));
    return WEXITSTATUS(status);
  }
  int sig = WTERMSIG(status);
  fprintf(stderr, "c_preexec: child %d killed by signal %d (%s)\n", (int)pid, sig, strsignal(sig));
  return 128 + sig;
}
