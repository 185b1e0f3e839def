#include "corral/reaper.hpp"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <linux/prctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "corral/fd.hpp"
#include "corral/syscalls.hpp"
#include "text.hpp"

namespace corral {
namespace {

// waitid(P_ALL, WEXITED|WNOHANG|WNOWAIT): a look at an exited child
// (info.si_pid, 0 when none has exited) that reaps nothing. 0, or the
// errno: ECHILD when no child a wait without __WALL sees is left.
int peek_exited_child(siginfo_t& info) noexcept {
  int r;
  do r = waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT);
  while (r != 0 && errno == EINTR);
  return r == 0 ? 0 : errno;
}

// Reaps `pid` if it has exited; never blocks. True when it was reaped.
bool reap_if_exited(pid_t pid) {
  siginfo_t info{};
  int r;
  do r = waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG);
  while (r != 0 && errno == EINTR);
  return r == 0 && info.si_pid == pid;
}

// Our children, zombies included, from /proc/self/task/<tid>/children
// (Linux 3.5, CONFIG_PROC_CHILDREN). Orphans are adopted by any thread of
// the subreaper, so every thread's list is read. False when the files do
// not exist.
bool children_from_task_lists(std::vector<pid_t>& out) {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return false;
  bool found = false;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    auto text = detail::read_to_end(std::string("/proc/self/task/") + e->d_name + "/children");
    if (!text) continue;
    found = true;
    // "pid pid ... " (each followed by a space).
    for (auto word : detail::split(*text, ' ')) {
      pid_t pid = 0;
      if (std::from_chars(word.data(), word.data() + word.size(), pid).ec == std::errc() && pid > 0)
        out.push_back(pid);
    }
  }
  closedir(dir);
  return found;
}

// Field `field` (1-based, as proc(5) counts them; 3 or later) of
// /proc/PID/stat as a number; nullopt when the process is gone or the
// field is not one. The comm (field 2) may hold spaces and parentheses:
// the fields after it are counted from its last ')'.
std::optional<std::uint64_t> stat_field(pid_t pid, int field) {
  auto stat = detail::read_to_end("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return std::nullopt;
  auto close = stat->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  const char* p = stat->data() + close + 1;
  const char* end = stat->data() + stat->size();
  for (int f = 3; f < field; ++f) {
    while (p < end && *p == ' ') ++p;
    while (p < end && *p != ' ') ++p;
  }
  while (p < end && *p == ' ') ++p;
  std::uint64_t value = 0;
  if (std::from_chars(p, end, value).ec != std::errc()) return std::nullopt;
  return value;
}

// Fallback without CONFIG_PROC_CHILDREN: every process whose stat names
// us as parent. O(processes on the host), hence only a fallback.
void children_from_proc_scan(std::vector<pid_t>& out) {
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return;
  const pid_t self = getpid();
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    auto ppid = stat_field(static_cast<pid_t>(pid), 4);
    if (ppid && *ppid == static_cast<std::uint64_t>(self)) out.push_back(static_cast<pid_t>(pid));
  }
  closedir(dir);
}

// Reaps every untracked exited child found by listing them.
std::size_t reap_listed(const ReapFilter& is_tracked) {
  std::vector<pid_t> children;
  if (!children_from_task_lists(children)) children_from_proc_scan(children);
  std::size_t reaped = 0;
  for (pid_t pid : children)
    if (!(is_tracked && is_tracked(pid)) && reap_if_exited(pid)) ++reaped;
  return reaped;
}

}  // namespace

Status become_subreaper() {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
    return Error::from_errno(errno, "reaper: prctl(PR_SET_CHILD_SUBREAPER)");
  return {};
}

bool is_subreaper() noexcept {
  int value = 0;
  return prctl(PR_GET_CHILD_SUBREAPER, &value, 0, 0, 0) == 0 && value != 0;
}

// Runs in the child; async-signal-safe: one raw prctl.
int become_subreaper_in_child() noexcept {
  return sys::error_of(sys::call(SYS_prctl, PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0));
}

std::size_t reap_orphans(const ReapFilter& is_tracked) {
  std::size_t reaped = 0;
  for (;;) {
    siginfo_t info{};
    // Only a look: reaping a tracked child here would steal the exit
    // status from its owner's pidfd.
    if (peek_exited_child(info) != 0) return reaped;  // ECHILD: no children at all
    if (info.si_pid == 0) return reaped;  // children, none exited
    pid_t pid = info.si_pid;
    if (is_tracked && is_tracked(pid)) {
      // P_ALL would return this same zombie forever: list the rest.
      return reaped + reap_listed(is_tracked);
    }
    if (!reap_if_exited(pid)) return reaped;  // reaped by someone else meanwhile
    ++reaped;
  }
}

bool no_children_but_clone_children() noexcept {
  siginfo_t info{};
  return peek_exited_child(info) == ECHILD;
}

std::size_t kill_unclaimed_children(const ReapFilter& is_kept, double max_seconds) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(max_seconds));
  std::size_t killed = 0;
  std::vector<pid_t> signalled;
  // A round per generation: a killed process's children are ours once it
  // has died. A fork chain that outruns the rounds meets the deadline.
  for (;;) {
    std::vector<pid_t> children;
    if (!children_from_task_lists(children)) children_from_proc_scan(children);
    std::vector<UniqueFd> dying;
    for (pid_t pid : children) {
      if (is_kept && is_kept(pid)) continue;
      // Once per call: a child killed in an earlier round that is still
      // listed is a zombie this wait may not reap (a clone child of ours,
      // e.g. a guardian told to stop: its owner reaps it with __WALL), and
      // waiting for it again would spin to the bound.
      if (std::find(signalled.begin(), signalled.end(), pid) != signalled.end()) continue;
      UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
      if (!fd) continue;  // reaped meanwhile
      (void)::syscall(SYS_pidfd_send_signal, fd.get(), SIGKILL, nullptr, 0);
      signalled.push_back(pid);
      dying.push_back(std::move(fd));
    }
    if (dying.empty()) return killed;
    for (const UniqueFd& fd : dying) {
      // Readable once it has exited; then reaped here (it is nobody's).
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{fd.get(), POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return killed;
      siginfo_t info{};
      if (::waitid(P_PIDFD, static_cast<id_t>(fd.get()), &info, WEXITED | WNOHANG) == 0 && info.si_pid != 0 &&
          info.si_code == CLD_KILLED && info.si_status == SIGKILL)
        ++killed;
    }
    if (Clock::now() >= deadline) return killed;
  }
}

std::optional<std::uint64_t> process_start_ticks(pid_t pid) { return stat_field(pid, 22); }  // starttime

std::uint64_t boottime_ticks_now() {
  static const long hz = [] {
    long v = ::sysconf(_SC_CLK_TCK);
    return v > 0 ? v : 100;
  }();
  struct timespec ts {};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  const std::uint64_t ns = static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
  return ns / (1000000000ull / static_cast<std::uint64_t>(hz));
}

}  // namespace corral
