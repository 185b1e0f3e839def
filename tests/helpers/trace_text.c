/* trace_text: the instructions a command executes in its own binary, in the
 * order it first executes them, found by single-stepping it with ptrace.
 * scripts/hot-text runs it to lay out the CLI's hot code (see there), and
 * cli_test to count the code pages a one-run `corral run` touches.
 *
 *   trace_text OUT BINARY ARGS...
 *
 * Writes to OUT one line per distinct instruction address, as an offset
 * from the binary's load address (its first mapping, file offset 0), in
 * the order the command first reached it. Every thread and process the
 * command starts is stepped too (they run the same code, in the same or a
 * copied address space) until it execs something else; then it is let go
 * and runs at full speed. Only a static binary is meaningful: the addresses
 * of code in shared libraries are not recorded. Exits with the command's
 * exit code, or 77 when ptrace is refused here.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stddef.h>

/* The exit code when this host does not let a process be traced (Yama's
 * ptrace_scope 3, a seccomp filter): the caller can skip, not fail. */
enum { kPtraceRefused = 77 };

static void die(const char *what) {
  fprintf(stderr, "trace_text: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* Open-addressing set of offsets; the order of first insertion is kept in
 * a separate array. */
static uint64_t *slots;
static size_t nslots = 1 << 22;
static uint64_t *order;
static size_t norder, order_cap;

static void record(uint64_t off) {
  uint64_t key = off + 1; /* 0 marks an empty slot */
  size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 42) & (nslots - 1);
  while (slots[i]) {
    if (slots[i] == key) return;
    i = (i + 1) & (nslots - 1);
  }
  slots[i] = key;
  if (norder == order_cap) {
    order_cap = order_cap ? order_cap * 2 : 1 << 16;
    order = realloc(order, order_cap * sizeof *order);
    if (!order) die("realloc");
  }
  order[norder++] = off;
  if (norder * 2 > nslots) {
    fprintf(stderr, "trace_text: more than %zu distinct instructions\n", nslots / 2);
    exit(1);
  }
}

/* The binary's load address and the end of its last mapping, from
 * /proc/PID/maps. */
static void binary_range(pid_t pid, const char *path, uint64_t *lo, uint64_t *hi) {
  char name[64], line[4096], real[4096];
  if (!realpath(path, real)) die("realpath");
  snprintf(name, sizeof name, "/proc/%d/maps", pid);
  FILE *f = fopen(name, "r");
  if (!f) die("open maps");
  *lo = *hi = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long long start, end, off;
    char file[4096] = "";
    if (sscanf(line, "%llx-%llx %*s %llx %*s %*s %4095s", &start, &end, &off, file) < 3) continue;
    if (strcmp(file, real) != 0) continue;
    if (off == 0 && (!*lo || start < *lo)) *lo = start;
    if (end > *hi) *hi = end;
  }
  fclose(f);
  if (!*lo) {
    fprintf(stderr, "trace_text: %s is not mapped in the traced process\n", real);
    exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: trace_text OUT BINARY ARGS...\n");
    return 2;
  }
  slots = calloc(nslots, sizeof *slots);
  if (!slots) die("calloc");
  pid_t first = fork();
  if (first < 0) die("fork");
  if (first == 0) {
    if (ptrace(PTRACE_TRACEME, 0, 0, 0) < 0) {
      fprintf(stderr, "trace_text: PTRACE_TRACEME: %s\n", strerror(errno));
      _exit(kPtraceRefused);
    }
    execv(argv[2], argv + 2);
    die("exec");
  }
  int status;
  /* The stop after the traced exec: the binary is mapped, nothing of it
   * has run yet. */
  if (waitpid(first, &status, 0) != first) die("waiting for the exec");
  if (WIFEXITED(status) && WEXITSTATUS(status) == kPtraceRefused) return kPtraceRefused;
  if (!WIFSTOPPED(status)) {
    fprintf(stderr, "trace_text: %s did not start\n", argv[2]);
    return 1;
  }
  uint64_t lo, hi;
  binary_range(first, argv[2], &lo, &hi);
  long opts = PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACEEXEC |
              PTRACE_O_EXITKILL;
  if (ptrace(PTRACE_SETOPTIONS, first, 0, opts) < 0) die("PTRACE_SETOPTIONS");
  if (ptrace(PTRACE_SINGLESTEP, first, 0, 0) < 0) die("PTRACE_SINGLESTEP");
  int first_status = 0;
  unsigned long steps = 0;
  for (;;) {
    pid_t tid = waitpid(-1, &status, __WALL);
    if (tid < 0) {
      if (errno == EINTR) continue;
      if (errno == ECHILD) break;
      die("waitpid");
    }
    if (WIFEXITED(status) || WIFSIGNALED(status)) {
      if (tid == first) first_status = status;
      continue;
    }
    if (!WIFSTOPPED(status)) continue;
    int sig = WSTOPSIG(status);
    int event = status >> 16;
    int deliver = 0;
    if (event == PTRACE_EVENT_EXEC) {
      /* Something else now runs in this process: let it go. */
      ptrace(PTRACE_DETACH, tid, 0, 0);
      continue;
    }
    if (event == 0 && sig == SIGTRAP) {
      struct user_regs_struct regs;
      if (ptrace(PTRACE_GETREGS, tid, 0, &regs) == 0 && regs.rip >= lo && regs.rip < hi) record(regs.rip - lo);
      steps++;
    } else if (event == 0 && sig != SIGSTOP) {
      deliver = sig; /* a signal the program sent or was sent: pass it on */
    }
    /* Event stops (clone, fork, vfork) and a new thread's first SIGSTOP:
     * step on, the signal suppressed. */
    if (ptrace(PTRACE_SINGLESTEP, tid, 0, deliver) < 0 && errno != ESRCH) die("PTRACE_SINGLESTEP");
  }
  FILE *out = fopen(argv[1], "w");
  if (!out) die("open OUT");
  for (size_t i = 0; i < norder; i++) fprintf(out, "%llx\n", (unsigned long long)order[i]);
  fclose(out);
  fprintf(stderr, "trace_text: %lu steps, %zu distinct instructions\n", steps, norder);
  return WIFEXITED(first_status) ? WEXITSTATUS(first_status) : 1;
}
