// The background thread (src/background_work.hpp) that empties and drops a
// run's workspace tmpfs off the supervisor's loop: what waits for it stays
// bounded, it never takes a signal meant for the supervisor, and a forked
// copy (which has no such thread) runs its jobs itself.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <future>
#include <string>
#include <thread>

#include "../src/background_work.hpp"
#include "support.hpp"

using corral::detail::run_in_background;
using corral::detail::wait_for_background_work;

namespace {

// Holds the thread until the returned promise is set; returns once the
// hold has begun.
std::shared_ptr<std::promise<void>> hold_the_thread() {
  auto let_go = std::make_shared<std::promise<void>>();
  std::shared_future<void> released = let_go->get_future().share();
  std::promise<void> began;
  auto begun = began.get_future();
  auto began_shared = std::make_shared<std::promise<void>>(std::move(began));
  run_in_background([released, began_shared] {
    began_shared->set_value();
    released.wait();
  });
  begun.wait();
  return let_go;
}

}  // namespace

// Two jobs may wait; a third runs in the caller before run_in_background
// returns, so a loop handing over workspaces faster than the thread empties
// them is held back instead of piling them (memory and fds) up. Without the
// bound the third would wait on the thread too.
Test(background_work, a_job_past_two_waiting_runs_in_the_caller) {
  auto let_go = hold_the_thread();
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> on_thread{0};
  for (int i = 0; i < 2; ++i)
    run_in_background([&] { on_thread += std::this_thread::get_id() != caller; });
  bool ran_here = false;
  run_in_background([&] { ran_here = std::this_thread::get_id() == caller; });
  cr_expect(ran_here, "the third job did not run in the caller while two waited");
  let_go->set_value();
  wait_for_background_work();
  cr_expect_eq(on_thread.load(), 2, "the two waiting jobs did not run on the thread");
}

// The thread blocks every signal: a SIGTERM sent to the supervisor's
// process must reach its signalfd, never a thread that would take the
// default action and kill it. Read from the thread's own status line.
Test(background_work, its_thread_blocks_every_signal) {
  std::string blocked;
  run_in_background([&] {
    blocked = corral_test::proc_status_field("thread-self", "SigBlk");
  });
  wait_for_background_work();
  cr_assert(!blocked.empty(), "no SigBlk line");
  const std::uint64_t mask = std::stoull(blocked, nullptr, 16);
  for (int sig : {SIGHUP, SIGINT, SIGTERM, SIGCHLD, SIGPIPE, SIGUSR1})
    cr_expect(mask & (std::uint64_t{1} << (sig - 1)), "signal %d is open on the thread (SigBlk %s)", sig,
              blocked.c_str());
}

// A forked copy has the queue's memory but not the thread: its job runs in
// it, at once. Queued instead, it would never run.
Test(background_work, a_forked_copy_runs_its_jobs_itself) {
  run_in_background([] {});
  wait_for_background_work();  // the thread runs in this process now
  auto end = corral_test::run_in_child([] {
    bool ran = false;
    run_in_background([&] { ran = true; });
    return ran ? 0 : 1;
  });
  corral_test::expect_child_ok(end);
}
