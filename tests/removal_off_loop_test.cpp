// A run that leaves its directory workspace full of files must not hold the
// supervisor's loop while they are unlinked (Workspace::remove_or_hand_off):
// a tier none run that left 200,000 empty files cost the loop 0.86 s at its
// end, every other run's pipes, deadlines and exits waiting. Past
// kEntriesInCaller entries the rest goes to the background thread, and the
// run's uid (tier process) comes back only once the directory is gone: a
// later run of the uid must never find it.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <future>

#include "../src/background_work.hpp"
#include "corral/supervisor.hpp"
#include "corral/workspace.hpp"
#include "support.hpp"
#include "supervisor_harness.hpp"

using namespace corral;
using corral_test::contains;
using corral_test::req;
using corral_test::TempDir;

namespace {

constexpr int kFiles = 10000;

std::size_t entries_in(const std::string& dir) {
  std::size_t n = 0;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = d ? readdir(d) : nullptr) n += std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..");
  if (d) closedir(d);
  return n;
}

std::string trimmed(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// A run of `tier` over a base the test chose (a directory workspace) that
// fills its workspace with kFiles empty files and prints where it is, while
// the background thread is held: its Result comes with the files still
// there. `then(sup, dir)` runs before the thread is let go, and says what
// is wrong ("" for nothing): an assertion there would leave the thread held
// and the test's exit waiting for it.
void files_outlive_the_result(Tier tier, SupervisorOptions o,
                              const std::function<std::string(Supervisor&, const std::string&)>& then) {
  TempDir base;
  auto sup = corral_test::supervisor_over(base, std::move(o));
  std::promise<void> let_go;
  std::shared_future<void> released = let_go.get_future().share();
  detail::run_in_background([released] { released.wait(); });
  Request r = req(tier, {"/bin/sh", "-c", corral_test::empty_files_until_refused({"."}, kFiles) + "pwd"});
  r.limits.set(Limit::wall_seconds, 60);
  auto res = sup->run(std::move(r));
  cr_assert(res.ok(), "%s", res.ok() ? "" : res.error().message().c_str());
  cr_assert_eq(res->outcome, Outcome::exited, "%s", res->detail.c_str());
  cr_assert(contains(res->stdout_capture.text, ". " + std::to_string(kFiles) + "\n"), "%s", res->stdout_capture.text.c_str());
  const std::string dir = trimmed(res->stdout_capture.text.substr(res->stdout_capture.text.find('\n') + 1));
  cr_assert(dir.rfind(base.path() + "/", 0) == 0, "not a directory of the base: %s", dir.c_str());
  const std::size_t left = entries_in(dir);
  const std::string wrong = then(*sup, dir);
  let_go.set_value();
  cr_expect(wrong.empty(), "%s", wrong.c_str());
  cr_expect(left > 0, "the supervisor's loop unlinked all %d files before the Result", kFiles);
  cr_expect(contains(res->detail, "the rest is removed after this result"), "%s", res->detail.c_str());
  // close() waits for what it handed off: nothing of the run is left.
  sup->close();
  cr_expect_neq(access(dir.c_str(), F_OK), 0, "%s outlived the supervisor's close", dir.c_str());
  cr_expect_eq(entries_in(base.path()), 0u, "the base is not empty");
}

}  // namespace

Test(removal_off_loop, tier_none_a_workspace_full_of_files_goes_after_the_result) {
  files_outlive_the_result(Tier::none, {}, [](Supervisor&, const std::string&) { return std::string(); });
}

// Over a range of one uid: while the directory is there the uid is not
// free (a second run is refused), and once it is gone the next run of the
// uid finds nothing of it.
Test(removal_off_loop, tier_process_holds_its_uid_until_its_workspace_is_gone) {
  CORRAL_SKIP_UNLESS_ROOT();
  SupervisorOptions o;
  o.uid_range_first = 299735;
  o.uid_range_count = 1;
  std::string old_dir;
  files_outlive_the_result(Tier::os_process, o, [&](Supervisor& sup, const std::string& dir) {
    old_dir = dir;
    auto second = sup.run(req(Tier::os_process, {"id", "-u"}));
    if (second.ok()) return std::string("a run was handed the uid while the last run's workspace was still there");
    if (!contains(second.error().message(), "uid pool 299735..299735: all 1 uids are"))
      return "refused for another reason: " + second.error().message();
    return std::string();
  });
  // A fresh supervisor over the same range: the uid is free, and the old
  // directory is gone.
  TempDir base;
  auto sup = corral_test::supervisor_over(base, o);
  auto next = sup->run(req(Tier::os_process, {"/bin/sh", "-c", "id -u; ls -d '" + old_dir + "' 2>&1"}));
  cr_assert(next.ok(), "%s", next.ok() ? "" : next.error().message().c_str());
  cr_assert(contains(next->stdout_capture.text, "299735\n"), "%s", next->stdout_capture.text.c_str());
  cr_assert(contains(next->stdout_capture.text, "No such file"), "%s", next->stdout_capture.text.c_str());
}

// Under the bound it all goes before the Result, errors reported as ever.
Test(removal_off_loop, a_workspace_with_few_files_is_removed_before_the_result) {
  TempDir base;
  auto sup = corral_test::supervisor_over(base);
  auto res = sup->run(req(Tier::none, {"/bin/sh", "-c", corral_test::empty_files_until_refused({"."}, 1000) + "pwd"}));
  cr_assert(res.ok());
  const std::string dir = trimmed(res->stdout_capture.text.substr(res->stdout_capture.text.find('\n') + 1));
  cr_assert_neq(access(dir.c_str(), F_OK), 0, "%s outlived its Result", dir.c_str());
  cr_assert(!contains(res->detail, "removed after this result"), "%s", res->detail.c_str());
}
