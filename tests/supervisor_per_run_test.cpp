// What the supervisor does once instead of per run, and the per-run steps it
// leaves out, still keep every promise of the run: end of output seen from
// the poll alone.
#include <string>

#include "supervisor_harness.hpp"

using namespace corral;

namespace {

Request sh(std::string script) {
  Request r;
  r.tier = Tier::none;
  r.argv = {"/bin/sh", "-c", std::move(script)};
  return r;
}

}  // namespace

// A pipe whose poll says POLLHUP without POLLIN is at its end: closed without
// a read. Output written right before the exit still arrives whole.
Test(supervisor_per_run, output_up_to_the_end_arrives_whole) {
  corral_test::Harness h;
  for (int round = 0; round < 20; ++round) {
    Result r = h.run(sh("printf 'last words'; printf 'to stderr' >&2"));
    cr_assert_eq(r.outcome, Outcome::exited, "%s", r.detail.c_str());
    cr_assert_eq(r.stdout_capture.text, "last words", "round %d", round);
    cr_assert_eq(r.stderr_capture.text, "to stderr", "round %d", round);
  }
  cr_expect_eq(h.leftovers(), 0u);
}
