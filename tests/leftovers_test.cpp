// What a dead supervisor left is swept by the next start; what a live one
// owns never is. Observed from the host: the owner records, the workspace
// base, the cgroup tree.
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "corral/leftovers.hpp"
#include "corral/output_collect.hpp"
#include "corral/privilege.hpp"
#include "corral/supervisor.hpp"
#include "corral/workspace.hpp"
#include "cli_runner.hpp"
#include "support.hpp"
#include "supervisor_harness.hpp"

using namespace corral;
using corral_test::TempDir;

namespace {

std::size_t entries(const std::string& dir, const std::string& prefix = "") {
  std::size_t n = 0;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = d ? readdir(d) : nullptr)
    n += e->d_name[0] != '.' && std::string(e->d_name).rfind(prefix, 0) == 0;
  if (d) closedir(d);
  return n;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::string token_of(Supervisor& s) {
  std::string id = s.next_run_id();  // r-<token>-<n>
  return id.substr(2, 12);
}

// A workspace in `base` named for the owner `tag`.
WorkspaceOptions tagged(const std::string& base, const char* tag) {
  WorkspaceOptions o;
  o.base_dir = base;
  o.name_tag = tag;
  return o;
}

// A dead owner, as a SIGKILLed supervisor leaves one: a child registers
// (o.name_tag, records in `owners`), makes a workspace as `o` says with
// home/left in it, and exits without cleaning up. Returns its path.
std::string leave_dead_owner(const WorkspaceOptions& o, const std::string& owners, const std::string& left) {
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t p = fork();
  if (p == 0) {
    auto rec = OwnerRecord::create(o.name_tag, o.base_dir, owners);
    auto ws = Workspace::create(o);
    if (!rec.ok() || !ws.ok()) _exit(1);
    (void)corral_test::write_file(ws->path() + "/home/left", left);
    (void)!write(fds[1], ws->path().data(), ws->path().size());
    _exit(0);  // no destructor: record and workspace (and a mount of it) stay
  }
  close(fds[1]);
  char buf[4096];
  ssize_t n = read(fds[0], buf, sizeof buf);
  close(fds[0]);
  int status = 0;
  waitpid(p, &status, 0);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0 && n > 0, "the dead owner never made its workspace");
  return std::string(buf, static_cast<std::size_t>(n));
}

}  // namespace

Test(leftovers, records_are_locked_while_their_owner_lives_and_swept_after) {
  if (!is_root_capable()) cr_skip_test("owner records are root's (linkat of an O_TMPFILE)");
  TempDir dir;
  const std::string owners = dir / "owners", base = dir / "base";
  cr_assert_eq(mkdir(base.c_str(), 0700), 0);
  // A dead owner: a child registers, leaves a workspace, and dies.
  (void)leave_dead_owner(tagged(base, "0123456789ab"), owners, "x");
  // A live owner with a workspace of its own, in the same base.
  auto made = OwnerRecord::create("ba9876543210", base, owners);
  cr_assert(made.ok(), "%s", made.ok() ? "" : made.error().message().c_str());
  std::optional<OwnerRecord> live(std::move(*made));
  auto mine = Workspace::create(tagged(base, "ba9876543210"));
  cr_assert(mine.ok());
  cr_assert_eq(entries(base, "corral-0123456789ab-"), 1u);
  cr_assert(exists(owners + "/0123456789ab"));

  SweepReport r = sweep_dead_supervisors("ffffffffffff", owners);
  cr_assert_eq(r.owners, 1, "problems: %s", r.problems.empty() ? "" : r.problems[0].c_str());
  cr_assert_eq(r.workspaces, 1);
  cr_assert_eq(entries(base, "corral-0123456789ab-"), 0u, "the dead owner's workspace stayed");
  cr_assert(!exists(owners + "/0123456789ab"), "the dead owner's record stayed");
  cr_assert(exists(mine->path()), "a live owner's workspace was swept");
  cr_assert(exists(owners + "/ba9876543210"), "a live owner's record was swept");
  // A normal end takes the record with it.
  live.reset();
  cr_assert(!exists(owners + "/ba9876543210"));
}

// A supervisor that dies with a run in flight leaves that run's tmpfs
// mounted on its directory (WorkspaceOptions::tmpfs_on_host, the default of
// a tier process run as root): the next start's sweep unmounts it and
// removes the directory. Without the unmount the directory's rmdir fails
// (EBUSY) and the tmpfs, with what the run wrote, stays.
Test(leftovers, a_dead_owners_mounted_tmpfs_workspace_is_unmounted_and_removed) {
  if (!is_root_capable()) cr_skip_test("owner records and tmpfs workspaces are root's");
  TempDir dir;
  const std::string owners = dir / "owners", base = dir / "base";
  cr_assert_eq(mkdir(base.c_str(), 0700), 0);
  WorkspaceOptions o = tagged(base, "0123456789ac");
  o.tmpfs_bytes = 8u << 20;
  o.tmpfs_mount_point = true;
  o.tmpfs_on_host = true;
  const std::string path = leave_dead_owner(o, owners, std::string(1 << 20, 'x'));
  cr_assert(corral_test::contains(corral_test::read_file("/proc/self/mountinfo"), " " + path + " "),
            "the dead owner's tmpfs is not mounted at %s", path.c_str());
  cr_assert(exists(path + "/home/left"));

  SweepReport r = sweep_dead_supervisors("ffffffffffff", owners);
  cr_expect_eq(r.owners, 1, "problems: %s", r.problems.empty() ? "" : r.problems[0].c_str());
  cr_expect_eq(r.workspaces, 1, "problems: %s", r.problems.empty() ? "" : r.problems[0].c_str());
  cr_expect(!corral_test::contains(corral_test::read_file("/proc/self/mountinfo"), " " + path + " "),
            "%s is still mounted", path.c_str());
  cr_expect(!exists(path), "the dead owner's workspace stayed");
  cr_expect(!exists(owners + "/0123456789ac"), "the dead owner's record stayed");
  (void)umount2(path.c_str(), MNT_DETACH);  // a failed run leaves the host as it found it
}

// A live library supervisor with a run in flight, and a CLI started beside
// it (which sweeps at start): the supervisor's workspace, record and run
// are untouched, and its run ends as it would have.
Test(leftovers, a_sweeping_start_never_touches_a_live_supervisor) {
  if (!is_root_capable()) cr_skip_test("owner records are root's (/run/corral)");
  corral_test::Harness h;
  const std::string token = token_of(*h.sup);
  std::optional<Result> result;
  RunCallbacks cb;
  cb.on_result = [&](const Result& r) { result = r; };
  Request r;
  r.tier = Tier::os_process;
  r.argv = {"sh", "-c", "sleep 1; echo done > home/mark; cat home/mark"};
  auto handle = h.sup->submit(std::move(r), cb);
  cr_assert(handle.ok());
  (void)h.sup->run_once(0.05);
  cr_assert_eq(h.leftovers(), 1u, "the run's workspace");
  for (int i = 0; i < 3; ++i) {
    auto cli = corral_test::run_cli({"run", "--", "true"}, {"CORRAL_WORKSPACE_BASE=" + h.base.path()});
    cr_assert_eq(cli.code, 0, "%s", cli.err.c_str());
    auto lib = Supervisor::create();
    cr_assert(lib.ok());
  }
  cr_assert_eq(entries(h.base.path(), "corral-" + token + "-"), 1u, "the live supervisor's workspace was swept");
  cr_assert(exists(std::string(kOwnersDir) + "/" + token), "the live supervisor's record was swept");
  while (!result) (void)h.sup->run_once(0.1);
  cr_assert_eq(result->outcome, Outcome::exited, "%s", result->detail.c_str());
  cr_assert_str_eq(result->stdout_capture.text.c_str(), "done\n");
}

// A dead container run's cgroup is swept with its owner; a live one's stays.
Test(leftovers, run_cgroups_of_a_dead_owner_go_and_a_live_owners_stay) {
  if (!is_root_capable()) cr_skip_test("owner records are root's (/run/corral)");
  CgroupProbe probe = probe_cgroups();
  if (probe.backend == CgroupVersion::none) cr_skip_test("no cgroup hierarchy: %s", probe.why_none.c_str());
  TempDir dir;
  const std::string owners = dir / "owners";
  auto dead = create_run_cgroup(probe, CgroupSpec{}, "r-00000000aaaa-1");
  auto live = create_run_cgroup(probe, CgroupSpec{}, "r-00000000bbbb-1");
  cr_assert(dead.ok() && live.ok());
  std::vector<std::string> dead_dirs = dead->dirs(), live_dirs = live->dirs();
  // Leave the dead one's directories behind, as a SIGKILLed supervisor does.
  pid_t p = fork();
  if (p == 0) {
    auto rec = OwnerRecord::create("00000000aaaa", dir.path(), owners);
    _exit(rec.ok() ? 0 : 1);
  }
  int status = 0;
  waitpid(p, &status, 0);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto rec = OwnerRecord::create("00000000bbbb", dir.path(), owners);
  cr_assert(rec.ok());
  // Forget the dead group without removing it (moved into a leaked object).
  new RunCgroup(std::move(*dead));
  SweepReport r = sweep_dead_supervisors("ffffffffffff", owners);
  cr_assert_eq(r.owners, 1);
  cr_assert_geq(r.cgroups, 1);
  for (const auto& d : dead_dirs) cr_assert(!exists(d), "%s stayed", d.c_str());
  for (const auto& d : live_dirs) cr_assert(exists(d), "%s was swept", d.c_str());
}

Test(leftovers, artifacts_never_go_into_a_directory_the_run_did_not_make) {
  TempDir root, dir;
  WorkspaceOptions o;
  o.base_dir = dir.path();
  auto ws = Workspace::create(o);
  cr_assert(ws.ok());
  cr_assert(ws->stage_bytes("out.txt", "mine\n").ok());
  Request r;
  r.argv = {"true"};
  r.outputs = {"out.txt"};
  r.artifact_root = root.path();
  Result first, again;
  first.run_id = again.run_id = "r-0123456789ab-1";
  collect_run_outputs(r, default_limits(), *ws, first, nullptr);
  cr_assert_eq(first.artifacts.size(), 1u);
  collect_run_outputs(r, default_limits(), *ws, again, nullptr);
  cr_assert(again.artifacts.empty(), "copied into an existing run directory");
  cr_assert_eq(again.artifact_notes.size(), 1u);
  cr_assert(again.artifact_notes[0].find("File exists") != std::string::npos, "%s", again.artifact_notes[0].c_str());
}

// Supervisor::close() does, before the supervisor is destroyed, all the
// destructor does that the host can see: the run in flight (tier process
// as root: a uid of its own) is killed and reaped, its workspace removed,
// the owner record gone; submit() refuses afterwards and the destructor
// has nothing left to do.
Test(leftovers, close_ends_what_the_host_sees_before_the_supervisor_goes) {
  if (!is_root_capable()) cr_skip_test("owner records are root's (/run/corral)");
  corral_test::Harness h;
  const std::string token = token_of(*h.sup);
  const std::string record = std::string(kOwnersDir) + "/" + token;
  cr_assert(exists(record), "no owner record at %s", record.c_str());
  bool delivered = false;
  RunCallbacks cb;
  cb.on_result = [&](const Result&) { delivered = true; };
  Request r;
  r.tier = Tier::os_process;
  r.argv = {"sh", "-c", "echo $$ > pid.tmp && mv pid.tmp pid && exec sleep 60"};
  auto handle = h.sup->submit(std::move(r), cb);
  cr_assert(handle.ok(), "%s", handle.ok() ? "" : handle.error().message().c_str());
  std::string pid_text;
  for (int i = 0; i < 200 && pid_text.empty(); ++i) {
    (void)h.sup->run_once(0.05);
    DIR* d = opendir(h.base.path().c_str());
    while (dirent* e = d ? readdir(d) : nullptr)
      if (e->d_name[0] != '.') pid_text = corral_test::read_file(h.base / (std::string(e->d_name) + "/pid"));
    if (d) closedir(d);
  }
  cr_assert(!pid_text.empty(), "the program did not start");
  const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
  h.sup->close();
  cr_assert(!exists("/proc/" + std::to_string(pid)), "the run's program outlived close() (reaped: no /proc entry)");
  cr_assert_eq(h.leftovers(), 0u, "the run's workspace outlived close()");
  cr_assert(!exists(record), "the owner record outlived close()");
  cr_assert(!delivered, "a result was delivered by close()");
  Request again;
  again.argv = {"true"};
  cr_assert(!h.sup->submit(std::move(again)).ok(), "submit after close() was accepted");
  auto more = h.sup->run_once(0);
  cr_assert(more.ok() && !*more, "run_once after close() said there is more to do");
  h.sup->close();  // idempotent; the destructor closes again
}

// `corral run` ends with _exit once Supervisor::close() is done: its
// workspace and its owner record are gone when it has exited.
Test(leftovers, a_cli_run_leaves_neither_its_workspace_nor_its_record) {
  TempDir base;
  chmod(base.path().c_str(), 0755);
  auto cli = corral_test::run_cli({"run", "--json", "--tier", "process", "--", "true"},
                                  {"CORRAL_WORKSPACE_BASE=" + base.path()});
  cr_assert_eq(cli.code, 0, "%s", cli.err.c_str());
  const auto at = cli.out.find("\"run_id\":\"r-");
  cr_assert(at != std::string::npos, "no run_id in %s", cli.out.c_str());
  const std::string token = cli.out.substr(at + 12, 12);
  cr_assert_eq(entries(base.path()), 0u, "the run's workspace outlived the CLI");
  if (is_root_capable())
    cr_assert(!exists(std::string(kOwnersDir) + "/" + token), "the CLI's owner record (%s) outlived it", token.c_str());
}
