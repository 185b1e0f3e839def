// The supervisor's run timers (supervisor_timers.cpp): one heap of the
// runs' deadlines, grace periods and drains, and a single ring timeout
// for the earliest. Each run must still end at its own time however the
// others' timers were armed, replaced or dropped before it.
#include <chrono>
#include <map>

#include "corral/supervisor.hpp"
#include "supervisor_harness.hpp"

using namespace corral;
using corral_test::Harness;

namespace {

Request sleeper(double wall, const char* secs = "30") {
  Request r;
  r.tier = Tier::none;
  r.argv = {"sleep", secs};
  if (wall > 0) r.limits.set(Limit::wall_seconds, wall);
  return r;
}

struct Ended {
  Outcome outcome;
  double after;  // seconds from the first submit to its result
};

// Runs submitted detached, each one's outcome and end time kept by name.
struct EndTimes {
  std::map<std::string, Ended> by_name;
  const std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();

  void submit(Harness& h, const std::string& name, Request r) {
    RunCallbacks cb;
    cb.on_result = [this, name](const Result& res) {
      by_name[name] = {res.outcome, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
    };
    auto handle = h.sup->submit(std::move(r), std::move(cb));
    cr_assert(handle.ok(), "%s: %s", name.c_str(), handle.ok() ? "" : handle.error().message().c_str());
    handle->detach();
  }
  Ended& operator[](const std::string& name) { return by_name[name]; }
  std::size_t count(const std::string& name) const { return by_name.count(name); }
  std::size_t size() const { return by_name.size(); }
};

}  // namespace

// A run due sooner than every timer already armed moves the ring's
// timeout forward: the late deadline is armed first, then a short one.
// The short run is killed at its own deadline, not at the first one's.
// A run that ends first drops its timer (heap removal) without disturbing
// the others'.
Test(supervisor_timers, a_sooner_deadline_is_not_held_up_by_a_later_one) {
  Harness h;
  EndTimes ended;
  auto submit = [&](const std::string& name, Request r) { ended.submit(h, name, std::move(r)); };
  submit("late", sleeper(8));           // the ring's timeout: +8 s
  submit("quick", sleeper(0, "0.1"));   // the default deadline, dropped at its exit
  submit("short", sleeper(0.4));        // sooner than every timer armed
  submit("middle", sleeper(1.2));
  // Until the quick, short and middle ones are over; then the late one.
  while (ended.size() < 3) cr_assert(h.sup->run_once(5.0).ok());
  cr_assert(!ended.count("late"), "the late run ended early: %s", to_string(ended["late"].outcome).data());
  cr_assert_eq(ended["quick"].outcome, Outcome::exited);
  cr_assert_eq(ended["short"].outcome, Outcome::killed_timeout);
  cr_assert_eq(ended["middle"].outcome, Outcome::killed_timeout);
  // Generous bounds: the late deadline (8 s) is what a missed move would give.
  cr_assert_lt(ended["short"].after, 5.0, "the short run ended %.2f s in", ended["short"].after);
  cr_assert_lt(ended["middle"].after, 6.0, "the middle run ended %.2f s in", ended["middle"].after);
  cr_assert_leq(ended["short"].after, ended["middle"].after);
  cr_assert(h.sup->run_until_idle().ok());
  cr_assert_eq(ended["late"].outcome, Outcome::killed_timeout);
  cr_assert_geq(ended["late"].after, 7.5, "the late run was killed before its deadline (%.2f s)", ended["late"].after);
}

// Thousands of timers armed and dropped in one supervisor: every run
// exits on its own (none is killed by a timer of another run's slot),
// and those given a short deadline all get theirs.
Test(supervisor_timers, many_runs_each_end_by_their_own_timer) {
  Harness h;
  int exited = 0, timed_out = 0, other = 0;
  for (int i = 0; i < 200; ++i) {
    const bool doomed = i % 10 == 3;
    RunCallbacks cb;
    cb.on_result = [&](const Result& res) {
      if (res.outcome == Outcome::exited) ++exited;
      else if (res.outcome == Outcome::killed_timeout) ++timed_out;
      else ++other;
    };
    auto handle = h.sup->submit(doomed ? sleeper(0.3) : sleeper(30, "0"), std::move(cb));
    cr_assert(handle.ok());
    handle->detach();
  }
  cr_assert(h.sup->run_until_idle().ok());
  cr_assert_eq(exited, 180);
  cr_assert_eq(timed_out, 20);
  cr_assert_eq(other, 0);
}

// The loop reads a run's pipe until the kernel says it is empty, without
// ever waiting in the read: the read end is not O_NONBLOCK (the reads say
// RWF_NOWAIT, or the supervisor made its end non-blocking where the
// kernel cannot). A program that prints a line and then holds its stdout
// open, quiet, must not hold up another run's deadline.
Test(supervisor_timers, a_quiet_pipe_does_not_hold_up_another_runs_deadline) {
  Harness h;
  EndTimes ended;
  auto submit = [&](const std::string& name, Request r) { ended.submit(h, name, std::move(r)); };
  Request quiet;
  quiet.tier = Tier::none;
  quiet.argv = {"sh", "-c", "echo hi; exec sleep 6"};
  submit("quiet", std::move(quiet));
  submit("short", sleeper(0.5));
  while (!ended.count("short")) cr_assert(h.sup->run_once(5.0).ok());
  cr_assert_eq(ended["short"].outcome, Outcome::killed_timeout);
  cr_assert_lt(ended["short"].after, 4.0, "the short run ended %.2f s in (a read waited on the quiet pipe)",
               ended["short"].after);
  cr_assert(!ended.count("quiet"));
  cr_assert(h.sup->run_until_idle().ok());
  cr_assert_eq(ended["quiet"].outcome, Outcome::exited);
}
