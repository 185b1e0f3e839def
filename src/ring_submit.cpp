// Checked io_uring submission for the supervisor (ring_submit.hpp).
#include "ring_submit.hpp"

#include <liburing.h>
#include <time.h>

#include <cerrno>
#include <string>

namespace corral::supervision {

Status submit_all(const SubmitHooks& hooks, std::string_view step) {
  const std::string who = "supervisor: io_uring_submit (" + std::string(step) + ")";
  int retries = 0;
  while (hooks.queued() > 0) {
    const int rc = hooks.submit();
    if (rc > 0 || rc == -EINTR) continue;
    if (rc < 0 && rc != -EAGAIN && rc != -EBUSY) return Error::from_errno(-rc, who);
    // -EAGAIN, -EBUSY, or nothing taken with SQEs queued: make room, retry.
    if (++retries > kSubmitRetries)
      return Error::from_errno(rc < 0 ? -rc : EBUSY,
                               who + ": the ring stayed busy after " + std::to_string(kSubmitRetries) + " retries");
    if (!hooks.make_room || !hooks.make_room()) {
      struct timespec ms {0, 1'000'000};
      ::nanosleep(&ms, nullptr);
    }
  }
  return {};
}

Status submit_all(io_uring& ring, std::string_view step, const std::function<bool()>& make_room) {
  SubmitHooks hooks;
  hooks.submit = [&ring] { return io_uring_submit(&ring); };
  hooks.queued = [&ring] { return io_uring_sq_ready(&ring); };
  hooks.make_room = make_room;
  return submit_all(hooks, step);
}

}  // namespace corral::supervision
