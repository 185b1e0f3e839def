// A forked helper that makes something in the kernel (a namespace), reports
// once and keeps it alive while the parent uses it: the namespace templates
// and the idmapped binds' user namespaces are both made this way.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "corral/fd.hpp"
#include "corral/status.hpp"
#include "corral/syscalls.hpp"

namespace corral {

// Fork a helper that runs `step` (raw calls only: we may have forked a
// threaded process) and reports the Record it returns, then keeps whatever
// it made alive until `use(pid, record)` has finished in the parent (the
// binds of its namespaces). The helper is reaped on every path.
// `make_error(errno, what)` names the caller in a failure's message.
template <class Record, class Step, class Use, class MakeError>
Status with_holding_helper(MakeError make_error, Step step, Use use) {
  int report[2], hold[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return make_error(errno, "pipe");
  if (::pipe2(hold, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(report[0]);
    ::close(report[1]);
    return make_error(e, "pipe");
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    for (int fd : {report[0], report[1], hold[0], hold[1]}) ::close(fd);
    return make_error(e, "fork the helper");
  }
  if (pid == 0) {
    sys::call(SYS_close, report[0]);
    sys::call(SYS_close, hold[1]);
    Record rec = step();
    sys::write_all(report[1], &rec, sizeof rec);
    char byte;
    while (sys::call(SYS_read, hold[0], reinterpret_cast<long>(&byte), 1) == -EINTR) {
    }
    for (;;) sys::call(SYS_exit_group, 0);
  }
  ::close(report[1]);
  ::close(hold[0]);
  UniqueFd report_read(report[0]), hold_write(hold[1]);
  Record rec{};
  ssize_t n;
  do {
    n = ::read(report_read.get(), &rec, sizeof rec);
  } while (n < 0 && errno == EINTR);
  Status result = n == static_cast<ssize_t>(sizeof rec)
                      ? use(pid, rec)
                      : Status(make_error(n < 0 ? errno : EPIPE, "the helper ended without a report"));
  hold_write.reset();
  int status;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return result;
}

}  // namespace corral
