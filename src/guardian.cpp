// The guardian (guardian.hpp). start() and the destructor run in the
// supervisor; guardian_main and what it calls run in the guardian, a
// CLONE_VM child that shares the supervisor's memory: raw syscalls only,
// no allocation, no locks, no errno.
#include "corral/guardian.hpp"

#include <linux/sched.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include <pthread.h>

#include "corral/syscalls.hpp"
#include "corral/uid_lock.hpp"

// process.cpp's clone3 trampoline: the guardian clones its kill helpers
// with it directly (clone_child builds an Expected, which may allocate).
extern "C" long corral_clone3_raw(struct clone_args* args, std::size_t size, corral::ChildFunction fn, void* arg);

namespace corral {

struct Guardian::Shared {
  std::atomic<int> quit{0};             // set by stop() before it wakes the guardian
  std::atomic<std::uint32_t> used{0};   // slots [0, used) may hold an entry
  int quit_read = -1;                   // the pipe's read end: a byte, or EOF
  int self_pidfd = -1;                  // pidfd of the supervisor: readable when it died
  int keep_fd = -1;                     // the uid lock file (shared open file description)
  const ChildStack* helper_stack = nullptr;
  // Entry per slot: (pgid << 32) | uid; 0 when empty. One 64-bit store, so
  // the guardian never reads half an entry.
  std::atomic<std::uint64_t>* entries = nullptr;
};

namespace {

constexpr std::size_t kHeaderBytes = 4096;  // Shared, then the guardian's TLS block
constexpr std::size_t kTlsOffset = 2048;    // zeroed; fs:0x28 (the canary) reads 0 there

struct HelperArgs {
  long uid;
};

// Guardian's helper (CLONE_VM|CLONE_VFORK, signals blocked): kill
// everything of the uid, as signal_uid's helper does (uid_lock.hpp: under
// credentials the run's processes cannot signal). kill(2) spares the caller.
int kill_uid_in_helper(void* p) noexcept {
  int setuid_error = 0;
  kill_uid_in_child(static_cast<HelperArgs*>(p)->uid, SIGKILL, &setuid_error);
  return setuid_error ? 1 : 0;
}

void kill_uid_from_guardian(long uid, const ChildStack& stack) noexcept {
  // A concurrent helper (another pool's) may kill ours first: again.
  for (int attempt = 0; attempt < kReaperHelperAttempts; ++attempt) {
    HelperArgs args{uid};
    struct clone_args ca;
    std::memset(&ca, 0, sizeof ca);
    ca.flags = CLONE_VM | CLONE_VFORK;
    ca.exit_signal = SIGCHLD;
    ca.stack = reinterpret_cast<std::uint64_t>(stack.base());
    ca.stack_size = stack.size();
    long pid = corral_clone3_raw(&ca, sizeof ca, kill_uid_in_helper, &args);
    if (pid < 0) return;
    int status = 0;
    while (sys::call(SYS_wait4, pid, reinterpret_cast<long>(&status), 0, 0) == -EINTR) {
    }
    if (WIFEXITED(status)) return;
  }
}

void kill_everything(Guardian::Shared& s) noexcept {
  const std::uint32_t n = std::min(s.used.load(std::memory_order_acquire), Guardian::kSlots);
  // The groups first (the uid kill would get them too, as root), then each
  // uid: what left its group.
  for (std::uint32_t i = 0; i < n; ++i) {
    std::uint64_t e = s.entries[i].load(std::memory_order_acquire);
    auto pgid = static_cast<pid_t>(e >> 32);
    if (pgid > 0) sys::call(SYS_kill, -static_cast<long>(pgid), SIGKILL);
  }
  for (std::uint32_t i = 0; i < n; ++i) {
    std::uint64_t e = s.entries[i].load(std::memory_order_acquire);
    auto uid = static_cast<std::uint32_t>(e);
    if (uid != 0) kill_uid_from_guardian(uid, *s.helper_stack);
  }
}

int guardian_main(void* p) noexcept {
  auto& s = *static_cast<Guardian::Shared*>(p);
  // Keep three fds, close every other one we got a copy of (the runs'
  // pipes above all: holding one would keep its reader from EOF).
  int keep[3] = {s.quit_read, s.self_pidfd, s.keep_fd};
  std::sort(keep, keep + 3);
  long next = 0;
  for (int fd : keep) {
    if (fd < 0) continue;
    if (fd > next) sys::call(SYS_close_range, next, fd - 1, 0);
    next = fd + 1;
  }
  sys::call(SYS_close_range, next, ~0u, 0);
  sys::call(SYS_prctl, PR_SET_NAME, reinterpret_cast<long>("corral-guard"), 0, 0, 0);
  // A session of its own: a kill aimed at the supervisor's process group
  // (a shell's `kill -9 %1`, a timeout(1)) is exactly what it must outlive.
  sys::call(SYS_setsid);

  struct pollfd fds[2] = {{s.quit_read, POLLIN, 0}, {s.self_pidfd, POLLIN, 0}};
  for (;;) {
    long r = sys::call(SYS_ppoll, reinterpret_cast<long>(fds), 2, 0, 0, 8);
    if (r > 0) break;
    if (r != -EINTR) return 1;  // cannot wait: leave everything alone
  }
  if (s.quit.load(std::memory_order_acquire)) return 0;  // stopped: the supervisor is fine
  kill_everything(s);
  return 0;
}

}  // namespace

namespace {

// Guardians told to stop that had not exited yet when their Guardian went:
// their table and stacks stay mapped until they have (checked at the next
// start or stop). Never destroyed: at process exit a guardian may still be
// on its way out, and unmapping its stack under it would crash it.
struct Retired {
  void* table;
  std::size_t bytes;
  ChildStack stacks[2];
  Pidfd pidfd;
};
std::mutex retired_mu;
std::vector<Retired>* retired = new std::vector<Retired>();

bool has_exited(const Pidfd& pidfd) {
  struct pollfd p = {pidfd.fd(), POLLIN, 0};
  return ::poll(&p, 1, 0) != 0;  // readable once it exited; an error: nothing to wait for
}

void free_exited_retired() {
  std::lock_guard lock(retired_mu);
  for (std::size_t i = 0; i < retired->size();) {
    Retired& r = (*retired)[i];
    if (!has_exited(r.pidfd)) {
      ++i;
      continue;
    }
    (void)wait_exit(r.pidfd, false);  // the zombie, unless a subreaper scan took it
    ::munmap(r.table, r.bytes);
    (*retired)[i] = std::move(retired->back());
    retired->pop_back();
  }
}

}  // namespace

Expected<std::unique_ptr<Guardian>> Guardian::start(int keep_fd) {
  free_exited_retired();
  static_assert(sizeof(Shared) <= kTlsOffset, "the TLS block follows Shared on the first page");
  std::unique_ptr<Guardian> g(new Guardian());
  g->table_bytes_ = kHeaderBytes + std::size_t{kSlots} * sizeof(std::uint64_t);
  void* map = ::mmap(nullptr, g->table_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
  if (map == MAP_FAILED) return Error::from_errno(errno, "guardian: mmap its table");
  g->table_ = map;
  g->shared_ = new (map) Shared();
  g->shared_->entries = reinterpret_cast<std::atomic<std::uint64_t>*>(static_cast<char*>(map) + kHeaderBytes);

  for (ChildStack* stack : {&g->guardian_stack_, &g->helper_stack_}) {
    auto made = ChildStack::allocate(64 * 1024);
    if (!made) return std::move(made).error().context("guardian");
    *stack = std::move(*made);
  }
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return Error::from_errno(errno, "guardian: pipe");
  UniqueFd quit_read(pipefd[0]);
  g->quit_write_.reset(pipefd[1]);
  long self = sys::call(SYS_pidfd_open, ::getpid(), 0);
  if (self < 0) return Error::from_errno(sys::error_of(self), "guardian: pidfd_open of the supervisor");
  g->self_pidfd_.reset(static_cast<int>(self));

  Shared& s = *g->shared_;
  s.quit_read = quit_read.get();
  s.self_pidfd = g->self_pidfd_.get();
  s.keep_fd = keep_fd;
  s.helper_stack = &g->helper_stack_;

  // clone3 by hand (clone_child always pairs CLONE_VM with CLONE_VFORK):
  // CLONE_VM without CLONE_VFORK, so it runs beside us; CLONE_SETTLS onto a
  // zeroed block of its own page, so its stack-protector reads never touch
  // the TLS of the thread that made it (which may exit and be unmapped
  // while the guardian lives on). Every signal is blocked around the clone:
  // none of our handlers may run on its stack; it keeps them blocked.
  int pidfd = -1;
  struct clone_args ca;
  std::memset(&ca, 0, sizeof ca);
  ca.flags = CLONE_VM | CLONE_PIDFD | CLONE_SETTLS;
  ca.pidfd = reinterpret_cast<std::uint64_t>(&pidfd);
  ca.exit_signal = 0;  // a clone child (guardian.hpp): invisible to the leftover check's waitid
  ca.stack = reinterpret_cast<std::uint64_t>(g->guardian_stack_.base());
  ca.stack_size = g->guardian_stack_.size();
  ca.tls = reinterpret_cast<std::uint64_t>(static_cast<char*>(map) + kTlsOffset);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  long pid = corral_clone3_raw(&ca, sizeof ca, guardian_main, &s);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return Error::from_errno(sys::error_of(pid), "guardian: clone3");
  Expected<Pidfd> child = Pidfd(static_cast<pid_t>(pid), UniqueFd(pidfd));
  g->pidfd_ = std::move(*child);
  // The guardian has its own copies of quit_read and the pidfd; ours of
  // quit_read closes here, the pidfd with the Guardian.
  return g;
}

void Guardian::watch(std::uint32_t slot, pid_t pgid, uid_t uid) noexcept {
  if (slot >= kSlots || !shared_) return;
  std::uint64_t e = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(pgid)) << 32) | uid;
  shared_->entries[slot].store(e, std::memory_order_release);
  std::uint32_t used = shared_->used.load(std::memory_order_relaxed);
  if (slot >= used) shared_->used.store(slot + 1, std::memory_order_release);
}

void Guardian::unwatch(std::uint32_t slot) noexcept {
  if (slot >= kSlots || !shared_) return;
  shared_->entries[slot].store(0, std::memory_order_release);
}

void Guardian::adopt(const Guardian& other) noexcept {
  if (!shared_ || !other.shared_) return;
  const std::uint32_t n = std::min(other.shared_->used.load(std::memory_order_acquire), kSlots);
  for (std::uint32_t i = 0; i < n; ++i) {
    std::uint64_t e = other.shared_->entries[i].load(std::memory_order_acquire);
    if (e != 0) watch(i, static_cast<pid_t>(e >> 32), static_cast<uid_t>(e));
  }
}

int Guardian::keep_fd() const noexcept { return shared_ ? shared_->keep_fd : -1; }

void Guardian::stop() noexcept {
  if (!shared_ || !quit_write_ || stopped_) return;
  stopped_ = true;
  shared_->quit.store(1, std::memory_order_release);
  char byte = 'q';
  // The byte wakes it; the write end stays open until the destructor (or
  // the exit): closing it now would be one more call for the same wake-up.
  (void)sys::write_all(quit_write_.get(), &byte, 1);
}

Guardian::~Guardian() {
  stop();
  free_exited_retired();
  if (!table_) return;
  // It must be gone before its stacks and table are unmapped. Not waited
  // for here: a one-run CLI would pay a scheduling round trip (tens of ms on
  // a loaded host) at exit for it. Gone already: freed now; else later.
  if (!pidfd_.valid() || has_exited(pidfd_)) {
    if (pidfd_.valid()) (void)wait_exit(pidfd_, false);
    ::munmap(table_, table_bytes_);
    return;
  }
  std::lock_guard lock(retired_mu);
  try {
    retired->push_back(Retired{table_, table_bytes_, {std::move(guardian_stack_), std::move(helper_stack_)},
                               std::move(pidfd_)});
  } catch (...) {
    // No memory to remember it: leave its memory mapped for good.
  }
}

}  // namespace corral
