// Internal to the supervisor's sources: every io_uring_submit of the loop
// goes through submit_all, so no submission result is dropped. Not installed.
//
// liburing's io_uring_submit returns how many SQEs the kernel took, or
// -errno (io_uring_enter(2)); SQEs the kernel did not take stay in the SQ
// ring, to be taken by the next submit. Of the errors, io_uring_enter(2)
// says:
//   EINTR   a signal came first: try again;
//   EAGAIN  the kernel ran out of resources for the request, and
//   EBUSY   completions overflowed and could not be flushed to the CQ ring:
//           "wait for some completions and try again".
// So: EINTR is retried at once; EAGAIN and EBUSY make room first (the
// caller moves the CQ ring's completions aside, to be handled in order by
// the loop) and are retried a bounded number of times; anything else, or a
// ring that stays busy, is an Error naming the step that submitted.
#pragma once

#include <functional>
#include <string_view>

#include "corral/status.hpp"

struct io_uring;

namespace corral::supervision {

struct SubmitHooks {
  // One io_uring_submit: the count taken or -errno.
  std::function<int()> submit;
  // SQEs still queued (io_uring_sq_ready).
  std::function<unsigned()> queued;
  // Makes room after EAGAIN/EBUSY (moves completions out of the CQ ring);
  // whether it moved any. May be empty.
  std::function<bool()> make_room;
};

// Retries after EAGAIN/EBUSY (or a submit that took nothing) before the
// ring counts as stuck: at most this many, 1 ms apart when no room was
// made, so at most ~0.1 s.
inline constexpr int kSubmitRetries = 100;

// Submits until nothing is queued. `step` names what was being submitted
// ("arm the deadline timer"): an error reads "supervisor: io_uring_submit
// (STEP): ..." with the errno's text.
Status submit_all(const SubmitHooks& hooks, std::string_view step);
// The same on a real ring.
Status submit_all(io_uring& ring, std::string_view step, const std::function<bool()>& make_room = {});

}  // namespace corral::supervision
