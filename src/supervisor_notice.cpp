// Out-of-line members of Supervisor::Impl (supervisor_impl.hpp): a run's
// seccomp listener. Tier process with --net none installs a filter whose
// socket refusals notify (process_runner.cpp; tier_seccomp in tier_runner.cpp); the refused call
// waits in the kernel until we answer it, here, with the EACCES the plain
// filter would have returned, and the count goes into the Result, so a
// program's "Permission denied" can be told to be corral's refusal.
//
// The answer must come promptly and cannot hang the run: the listener is
// polled through the ring like the pipes (a hostile flood of socket calls
// is answered one wakeup at a time, kNoticeBudget at most, between the
// other runs' completions); when the listener is closed (the run retired,
// the supervisor gone) the kernel fails the call itself, with ENOSYS.
#include "supervisor_impl.hpp"

namespace corral {

void Supervisor::Impl::arm_notice(std::uint32_t slot, Run& run) {
  io_uring_sqe* e = sqe();
  io_uring_prep_poll_add(e, run.listener.get(), POLLIN);
  io_uring_sqe_set_data64(e, user_data(slot, run.gen, kOpNotice));
  run.listener_armed = true;
}

void Supervisor::Impl::on_notice(std::uint32_t slot, Run& run, int res) {
  if (res < 0 || !run.listener) return;  // removed (the run retired) or the poll failed
  const unsigned events = static_cast<unsigned>(res);
  if (events & POLLIN) {
    for (std::size_t i = 0; i < kNoticeBudget; ++i) {
      auto nr = refuse_seccomp_notification(run.listener.get(), EACCES);
      if (nr) {
        std::string_view name = seccomp_notified_syscall_name(*nr);
        ++run.end.refused_syscalls[name.empty() ? "syscall " + std::to_string(*nr) : std::string(name)];
      } else if (nr.error().code() != ENOENT) {
        // Not one we can answer (a kernel whose notification outgrew our
        // buffer): stop listening rather than leave the caller waiting.
        // Closing the listener makes the kernel answer ENOSYS from now on.
        run.end.refusal_failure = nr.error().message() + "; later refusals failed with ENOSYS";
        run.listener.reset();
        return;
      }
      pollfd more{run.listener.get(), POLLIN, 0};
      if (::poll(&more, 1, 0) != 1 || !(more.revents & POLLIN)) break;
    }
  }
  // POLLHUP: no process uses the filter any more; nothing will come.
  if (events & (POLLHUP | POLLERR | POLLNVAL)) return;
  arm_notice(slot, run);
}

}  // namespace corral
