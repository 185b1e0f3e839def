#include "corral/process.hpp"

#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

#include "corral/syscalls.hpp"

// The clone3 trampoline. In the child it calls fn(arg) on the new stack and
// then exit_group()s with its result, so the child never returns into C++
// frames that belong to the parent (with CLONE_VM they are the parent's
// live frames). Registers r8/r9 (x9/x10) carry fn/arg across the syscall:
// the kernel preserves them and the child starts with a copy.
extern "C" long corral_clone3_raw(struct clone_args* args, std::size_t size,
                                  corral::ChildFunction fn, void* arg);

#if defined(__x86_64__)
__asm__(
    ".text\n"
    ".globl corral_clone3_raw\n"
    ".hidden corral_clone3_raw\n"
    ".type corral_clone3_raw,@function\n"
    "corral_clone3_raw:\n"
    "  mov %rdx, %r8\n"
    "  mov %rcx, %r9\n"
    "  mov $435, %eax\n"  // __NR_clone3
    "  syscall\n"
    "  test %rax, %rax\n"
    "  jz 1f\n"
    "  ret\n"
    "1:\n"
    "  xor %ebp, %ebp\n"
    "  and $-16, %rsp\n"
    "  mov %r9, %rdi\n"
    "  call *%r8\n"
    "  mov %eax, %edi\n"
    "  mov $231, %eax\n"  // __NR_exit_group
    "  syscall\n"
    "  hlt\n"
    ".size corral_clone3_raw, .-corral_clone3_raw\n");
#elif defined(__aarch64__)
__asm__(
    ".text\n"
    ".globl corral_clone3_raw\n"
    ".hidden corral_clone3_raw\n"
    ".type corral_clone3_raw,%function\n"
    "corral_clone3_raw:\n"
    "  mov x9, x2\n"
    "  mov x10, x3\n"
    "  mov x8, #435\n"
    "  svc #0\n"
    "  cbz x0, 1f\n"
    "  ret\n"
    "1:\n"
    "  mov x29, #0\n"
    "  mov x0, x10\n"
    "  blr x9\n"
    "  mov x8, #94\n"  // __NR_exit_group
    "  svc #0\n"
    "  brk #0\n"
    ".size corral_clone3_raw, .-corral_clone3_raw\n");
#endif

namespace corral {

Expected<Pidfd> Pidfd::open(pid_t pid) {
  long fd = sys::call(SYS_pidfd_open, pid, 0);
  if (fd < 0) return Error::from_errno(sys::error_of(fd), "pidfd_open(" + std::to_string(pid) + ")");
  return Pidfd(pid, UniqueFd(static_cast<int>(fd)));
}

int Pidfd::send_signal(int sig) const noexcept {
  if (!fd_.valid()) return ESRCH;
  return sys::error_of(sys::call(SYS_pidfd_send_signal, fd_.get(), sig, 0, 0));
}

Expected<double> process_cpu_seconds(pid_t pid) {
  clockid_t clock;
  if (int err = clock_getcpuclockid(pid, &clock); err != 0)
    return Error::from_errno(err, "clock_getcpuclockid(" + std::to_string(pid) + ")");
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return Error::from_errno(errno, "clock_gettime(cpu clock of " + std::to_string(pid) + ")");
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

Expected<double> runqueue_wait_seconds(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/schedstat";
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return Error::from_errno(errno, "open " + path);
  char buf[128];
  ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
  if (n <= 0) return Error::from_errno(n < 0 ? errno : EIO, "read " + path);
  buf[n] = '\0';
  unsigned long long on_cpu = 0, waiting = 0;
  if (std::sscanf(buf, "%llu %llu", &on_cpu, &waiting) != 2) return Error(EIO, path + ": unexpected format");
  return static_cast<double>(waiting) / 1e9;
}

double ExitStatus::cpu_seconds() const {
  auto tv = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return tv(usage.ru_utime) + tv(usage.ru_stime);
}

Expected<std::optional<ExitStatus>> wait_exit(const Pidfd& child, bool block) {
  siginfo_t info;
  std::memset(&info, 0, sizeof info);
  ExitStatus status;
  long rc;
  do {
    // glibc's waitid() has no rusage argument; the system call does.
    // __WALL: a clone child (the guardian's exit signal is 0) is waited for
    // too; without it waitid says ECHILD for one.
    rc = sys::call(SYS_waitid, P_PIDFD, child.fd(), reinterpret_cast<long>(&info),
                   WEXITED | __WALL | (block ? 0 : WNOHANG), reinterpret_cast<long>(&status.usage));
  } while (rc == -EINTR);
  if (rc < 0) return Error::from_errno(sys::error_of(rc), "waitid(pid " + std::to_string(child.pid()) + ")");
  if (info.si_pid == 0) return std::optional<ExitStatus>{};
  switch (info.si_code) {
    case CLD_EXITED:
      status.exited = true;
      status.exit_code = info.si_status;
      break;
    case CLD_DUMPED:
      status.core_dumped = true;
      [[fallthrough]];
    default:
      status.signal = info.si_status;
      break;
  }
  return std::optional<ExitStatus>{status};
}

int kill_group(const Pidfd& child, int sig) noexcept {
  int group_err = sys::error_of(sys::call(SYS_kill, -child.pid(), sig));
  int leader_err = child.send_signal(sig);
  return (group_err == 0 || leader_err == 0) ? 0 : leader_err;
}

Expected<ChildStack> ChildStack::allocate(std::size_t bytes) {
  long page = sysconf(_SC_PAGESIZE);
  std::size_t size = (bytes + page - 1) / page * page;
  std::size_t total = size + page;
  void* map = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (map == MAP_FAILED) return Error::from_errno(errno, "mmap child stack");
  // Guard page at the low end: a runaway child faults instead of scribbling.
  if (mprotect(map, page, PROT_NONE) != 0) {
    int err = errno;
    munmap(map, total);
    return Error::from_errno(err, "mprotect child stack guard");
  }
  ChildStack stack;
  stack.map_ = map;
  stack.map_size_ = total;
  stack.base_ = static_cast<char*>(map) + page;
  stack.size_ = size;
  return stack;
}

ChildStack::ChildStack(ChildStack&& other) noexcept { *this = std::move(other); }

ChildStack& ChildStack::operator=(ChildStack&& other) noexcept {
  if (this != &other) {
    if (map_) munmap(map_, map_size_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

ChildStack::~ChildStack() {
  if (map_) munmap(map_, map_size_);
}

void* ChildStack::top() const noexcept {
  auto end = reinterpret_cast<std::uintptr_t>(base_) + size_;
  return reinterpret_cast<void*>(end & ~std::uintptr_t{15});
}

Expected<Pidfd> clone_child(const CloneSpec& spec, ChildFunction fn, void* arg) {
  if (spec.share_memory && (spec.stack == nullptr || spec.stack->base() == nullptr))
    return Error::invalid("clone: CLONE_VM needs a child stack");
  int pidfd = -1;
  struct clone_args args;
  std::memset(&args, 0, sizeof args);
  args.flags = spec.flags | CLONE_PIDFD;
  if (spec.share_memory) args.flags |= CLONE_VM | CLONE_VFORK;
  args.pidfd = reinterpret_cast<std::uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  if (spec.stack != nullptr) {
    args.stack = reinterpret_cast<std::uint64_t>(spec.stack->base());
    args.stack_size = spec.stack->size();
  }
  if (spec.cgroup_fd >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<std::uint64_t>(spec.cgroup_fd);
  }
  // Sharing our memory, the child runs on a borrowed stack: no handler of
  // ours may run there, so every signal is blocked around the clone (the
  // child sets its own mask; ours comes back). With CLONE_CLEAR_SIGHAND
  // the kernel has reset every handler in the child at the clone itself
  // (clone(2): what was caught is SIG_DFL there, what was ignored stays
  // ignored), so none of ours can run there and the two sigprocmask calls
  // a spawn are not needed; a signal that reaches the child before it
  // execs gets the default action it would get once its own set-up
  // unblocks it. A fork-like child inherits the caller's mask as fork(2)
  // would.
  const bool block = spec.share_memory && !spec.signals_blocked && (spec.flags & CLONE_CLEAR_SIGHAND) == 0;
  sigset_t all, old;
  if (block) {
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
  }
  long pid = corral_clone3_raw(&args, sizeof args, fn, arg);
  if (block) pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return Error::from_errno(sys::error_of(pid), "clone3");
  // clone3 sets O_CLOEXEC on the pidfd it returns.
  return Pidfd(static_cast<pid_t>(pid), UniqueFd(pidfd));
}

int become_session_leader_in_child() noexcept {
  return sys::error_of(sys::call(SYS_setsid));
}

int make_first_oom_victim_in_child() noexcept {
  long fd = sys::call(SYS_openat, AT_FDCWD, reinterpret_cast<long>("/proc/self/oom_score_adj"), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return sys::error_of(fd);
  long written = sys::call(SYS_write, fd, reinterpret_cast<long>("1000"), 4);
  sys::call(SYS_close, fd);
  return written < 0 ? sys::error_of(written) : 0;
}

}  // namespace corral
