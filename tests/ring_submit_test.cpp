// The supervisor's checked io_uring submission (src/ring_submit.hpp): what
// io_uring_enter(2) says to retry is retried, anything else is an error
// naming the step, and nothing queued is left behind silently.
#include <criterion/criterion.h>
#include <liburing.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "../src/ring_submit.hpp"

using namespace corral;
using namespace corral::supervision;

namespace {

// A ring that answers from a script: each submit pops the next return
// value; a positive one takes that many SQEs.
struct ScriptedRing {
  std::vector<int> answers;
  unsigned queued = 0;
  int submits = 0, rooms = 0;
  SubmitHooks hooks(bool with_room = true) {
    SubmitHooks h;
    h.submit = [this] {
      int rc = submits < static_cast<int>(answers.size()) ? answers[static_cast<std::size_t>(submits)] : -EBUSY;
      ++submits;
      if (rc > 0) queued -= std::min<unsigned>(queued, static_cast<unsigned>(rc));
      return rc;
    };
    h.queued = [this] { return queued; };
    if (with_room)
      h.make_room = [this] {
        ++rooms;
        return true;
      };
    return h;
  }
};

}  // namespace

Test(ring_submit, eintr_is_retried_until_everything_is_taken) {
  ScriptedRing r{{-EINTR, -EINTR, 2, 1}, 3};
  Status st = submit_all(r.hooks(), "arm a timer");
  cr_assert(st, "%s", st ? "" : st.error().message().c_str());
  cr_assert_eq(r.queued, 0u);
  cr_assert_eq(r.submits, 4);
  cr_assert_eq(r.rooms, 0, "EINTR needs no room made");
}

Test(ring_submit, ebusy_and_eagain_make_room_then_retry) {
  ScriptedRing r{{-EBUSY, -EAGAIN, 0, 4}, 4};
  Status st = submit_all(r.hooks(), "arm a timer");
  cr_assert(st, "%s", st ? "" : st.error().message().c_str());
  cr_assert_eq(r.queued, 0u);
  cr_assert_eq(r.rooms, 3, "room made after EBUSY, EAGAIN and a submit that took nothing");
}

Test(ring_submit, another_error_names_the_step) {
  ScriptedRing r{{-EBADF}, 1};
  Status st = submit_all(r.hooks(), "arm the deadline timer");
  cr_assert(!st);
  cr_assert_eq(st.error().code(), EBADF);
  const std::string& m = st.error().message();
  cr_assert(m.find("io_uring_submit (arm the deadline timer)") != std::string::npos, "%s", m.c_str());
  cr_assert_eq(r.submits, 1, "not retried");
}

Test(ring_submit, a_ring_that_stays_busy_is_an_error_not_a_hang) {
  ScriptedRing r{{}, 2};  // -EBUSY forever
  Status st = submit_all(r.hooks(), "flush a full submission queue");
  cr_assert(!st);
  cr_assert_eq(st.error().code(), EBUSY);
  cr_assert(st.error().message().find("stayed busy") != std::string::npos, "%s", st.error().message().c_str());
  cr_assert_eq(r.submits, kSubmitRetries + 1);
}

Test(ring_submit, nothing_queued_submits_nothing) {
  ScriptedRing r{{-EBADF}, 0};
  cr_assert(submit_all(r.hooks(), "idle"));
  cr_assert_eq(r.submits, 0);
}

// A real ring: NOPs go through; a ring whose fd is gone gives the kernel's
// EBADF with the step, where a bare io_uring_submit's result was dropped.
Test(ring_submit, real_ring) {
  io_uring ring;
  int rc = io_uring_queue_init(8, &ring, 0);
  if (rc < 0) cr_skip_test("io_uring_queue_init: %s", strerror(-rc));
  for (int i = 0; i < 3; ++i) io_uring_prep_nop(io_uring_get_sqe(&ring));
  Status st = submit_all(ring, "three nops");
  cr_assert(st, "%s", st ? "" : st.error().message().c_str());
  cr_assert_eq(io_uring_sq_ready(&ring), 0u);
  io_uring_cqe* cqe;
  for (int i = 0; i < 3; ++i) {
    cr_assert_eq(io_uring_wait_cqe(&ring, &cqe), 0);
    io_uring_cqe_seen(&ring, cqe);
  }
  io_uring_prep_nop(io_uring_get_sqe(&ring));
  const int fd = ring.ring_fd;
  ::close(fd);
  st = submit_all(ring, "a nop on a closed ring");
  cr_assert(!st);
  cr_assert_eq(st.error().code(), EBADF, "%s", st.error().message().c_str());
  cr_assert(st.error().message().find("(a nop on a closed ring)") != std::string::npos);
  // The mappings are still ours to unmap; the fd is gone already.
  ring.ring_fd = -1;
  io_uring_queue_exit(&ring);
}
