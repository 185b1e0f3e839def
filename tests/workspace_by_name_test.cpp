// Workspaces made and removed by name below a shared base
// (WorkspaceOptions::by_name): what the fd-held workspace promises, kept
// with no fd held between creation and removal. Hostile leftovers are
// planted as the run's uid would plant them.
#include <sys/stat.h>

#include <filesystem>
#include <initializer_list>

#include "corral/workspace.hpp"
#include "support.hpp"

using namespace corral;
namespace fs = std::filesystem;

namespace {

constexpr uid_t kOtherUid = 200000;  // an id no account uses

std::shared_ptr<const WorkspaceBase> open_base(const std::string& dir) {
  auto b = WorkspaceBase::open(dir);
  cr_assert(b.ok(), "%s", b.ok() ? "" : b.error().message().c_str());
  return *b;
}

Workspace by_name(const std::shared_ptr<const WorkspaceBase>& base, std::optional<WorkspaceOwner> owner = std::nullopt,
                  bool make_tmp = true) {
  WorkspaceOptions o;
  o.base = base;
  o.owner = owner;
  o.by_name = true;
  o.make_tmp = make_tmp;
  auto ws = Workspace::create(o);
  cr_assert(ws.ok(), "%s", ws.ok() ? "" : ws.error().message().c_str());
  return std::move(ws).value();
}

bool exists_nofollow(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

std::size_t entries(const std::string& dir) {
  std::size_t n = 0;
  for (auto it = fs::directory_iterator(dir); it != fs::directory_iterator(); ++it) ++n;
  return n;
}

// The run's uid when we are root (the workspace's owner), else ourselves.
std::optional<WorkspaceOwner> run_owner() {
  if (geteuid() != 0) return std::nullopt;
  return WorkspaceOwner{kOtherUid, kOtherUid};
}

// fn as the run's program would run it: as the owner uid when we are root.
corral_test::ChildEnd as_the_run(const std::function<int()>& fn) { return corral_test::run_in_child_as(kOtherUid, fn); }

using corral_test::expect_child_ok;

}  // namespace

Test(workspace_by_name, it_holds_no_fd_from_creation_and_is_the_same_private_tree) {
  corral_test::TempDir dir;
  cr_assert_eq(chmod(dir.path().c_str(), 0755), 0);
  auto base = open_base(dir.path());
  const std::size_t fds = corral_test::open_fd_count();
  Workspace ws = by_name(base, run_owner());
  cr_assert_eq(corral_test::open_fd_count(), fds, "the workspace holds an fd");
  cr_assert(ws.released() && !ws.removed());
  cr_assert_eq(ws.dirfd(), -1);
  for (const std::string& p : {ws.path(), ws.home(), ws.tmp()}) {
    struct stat st {};
    cr_assert_eq(lstat(p.c_str(), &st), 0, "%s", p.c_str());
    cr_expect(S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700, "%s is %o", p.c_str(), st.st_mode & 07777);
    if (geteuid() == 0) cr_expect(st.st_uid == kOtherUid && st.st_gid == kOtherUid, "%s not the run's", p.c_str());
  }
  // Staging opens it (checked to be the inode made); reading outputs needs that too.
  cr_assert(ws.stage_bytes("in/a.txt", "hello").ok());
  cr_assert_eq(corral_test::read_file(ws.path() + "/in/a.txt"), "hello");
  cr_assert(ws.release_fd().ok());
  std::string p = ws.path();
  cr_assert(ws.remove().ok());
  cr_assert(ws.removed());
  cr_assert(!exists_nofollow(p));
  cr_assert_eq(entries(base->path()), 0u);
}

Test(workspace_by_name, without_tmp_it_is_made_and_removed_the_same) {
  corral_test::TempDir dir;
  cr_assert_eq(chmod(dir.path().c_str(), 0755), 0);
  auto base = open_base(dir.path());
  Workspace ws = by_name(base, std::nullopt, /*make_tmp=*/false);
  cr_assert(fs::is_directory(ws.home()) && !exists_nofollow(ws.tmp()));
  cr_assert(ws.remove().ok());
  cr_assert_eq(entries(base->path()), 0u);
}

Test(workspace_by_name, a_umask_taking_the_owners_bits_still_gives_0700) {
  corral_test::TempDir dir;
  cr_assert_eq(chmod(dir.path().c_str(), 0755), 0);
  auto base = open_base(dir.path());
  mode_t old = ::umask(0277);
  WorkspaceOptions o;
  o.base = base;
  o.owner = run_owner();
  o.by_name = true;
  auto made = Workspace::create(o);
  ::umask(old);
  cr_assert(made.ok(), "%s", made.ok() ? "" : made.error().message().c_str());
  for (const std::string& p : {made->path(), made->home(), made->tmp()}) {
    struct stat st {};
    cr_assert_eq(lstat(p.c_str(), &st), 0, "%s", p.c_str());
    cr_expect_eq(st.st_mode & 07777, 0700u, "%s is %o", p.c_str(), st.st_mode & 07777);
  }
  cr_assert(made->remove().ok());
  cr_assert_eq(entries(base->path()), 0u);
}

// The run swaps home/ and tmp/ for links to empty directories outside: a
// removal by name that followed them would rmdir the targets.
Test(workspace_by_name, links_in_place_of_home_and_tmp_are_unlinked_and_their_targets_left) {
  corral_test::TempDir dir, outside;
  cr_assert_eq(chmod(dir.path().c_str(), 0755), 0);
  cr_assert_eq(chmod(outside.path().c_str(), 0777), 0);
  auto base = open_base(dir.path());
  for (const char* t : {"home", "tmp"}) cr_assert_eq(mkdir((outside / t).c_str(), 0777), 0);
  Workspace ws = by_name(base, run_owner());
  expect_child_ok(as_the_run([&] {
    for (const char* t : {"home", "tmp"}) {
      std::string mine = ws.path() + "/" + t;
      if (rmdir(mine.c_str()) != 0 || symlink((outside / t).c_str(), mine.c_str()) != 0) return 1;
    }
    return 0;
  }));
  std::string p = ws.path();
  cr_assert(ws.remove().ok(), "%s", ws.remove().ok() ? "" : "remove failed");
  cr_assert(!exists_nofollow(p), "the workspace is left");
  for (const char* t : {"home", "tmp"}) cr_assert(fs::is_directory(outside / t), "followed the link to %s", t);
}

// The root renamed away and an impostor made at its name that looks just
// like a fresh workspace (empty home/ and tmp/): nothing of it is removed,
// and the real tree is not touched by name either.
Test(workspace_by_name, a_root_replaced_by_a_lookalike_is_left_untouched) {
  corral_test::TempDir dir;
  cr_assert_eq(chmod(dir.path().c_str(), 0755), 0);
  auto base = open_base(dir.path());
  Workspace ws = by_name(base);
  std::string p = ws.path(), moved = dir / "moved";
  cr_assert_eq(rename(p.c_str(), moved.c_str()), 0);
  for (const std::string& d : {p, p + "/home", p + "/tmp"}) cr_assert_eq(mkdir(d.c_str(), 0700), 0);
  auto st = ws.remove();
  cr_assert(!st.ok(), "removed an impostor");
  cr_assert(st.error().message().find("moved or replaced") != std::string::npos, "%s", st.error().message().c_str());
  for (const std::string& d : {p + "/home", p + "/tmp", moved + "/home", moved + "/tmp"})
    cr_assert(fs::is_directory(d), "%s was removed", d.c_str());
}

// Whatever else the run leaves makes the rmdir by name fail; the walk
// through fds takes it all: 000 directories, a deep tree, a link out.
Test(workspace_by_name, what_the_run_leaves_goes_with_the_walk) {
  corral_test::TempDir dir, outside;
  cr_assert_eq(chmod(dir.path().c_str(), 0755), 0);
  auto base = open_base(dir.path());
  corral_test::write_file(outside / "keep", "x");
  Workspace ws = by_name(base, run_owner());
  expect_child_ok(as_the_run([&] {
    std::string a = ws.path() + "/a", b = a + "/b";
    if (mkdir(a.c_str(), 0700) || mkdir(b.c_str(), 0700)) return 1;
    int fd = open((b + "/f").c_str(), O_CREAT | O_WRONLY, 0600);
    if (fd < 0) return 2;
    close(fd);
    if (symlink((outside / "keep").c_str(), (ws.home() + "/link").c_str())) return 3;
    if (chmod(b.c_str(), 0) || chmod(a.c_str(), 0)) return 4;
    return 0;
  }));
  std::string p = ws.path();
  auto st = ws.remove();
  cr_assert(st.ok(), "%s", st.ok() ? "" : st.error().message().c_str());
  cr_assert(!exists_nofollow(p));
  cr_assert_eq(corral_test::read_file(outside / "keep"), "x");
  cr_assert_eq(entries(base->path()), 0u);
}

// A run with corral's own uid (not root: tier none) can chmod its root 000:
// the names below it cannot be looked up, so the walk chmods it back.
Test(workspace_by_name, a_root_made_000_is_still_removed) {
  corral_test::TempDir dir;
  cr_assert_eq(chmod(dir.path().c_str(), 0755), 0);
  auto base = open_base(dir.path());
  Workspace ws = by_name(base, run_owner());
  corral_test::write_file(ws.home() + "/f", "x");
  expect_child_ok(as_the_run([&] { return chmod(ws.path().c_str(), 0) == 0 ? 0 : 1; }));
  std::string p = ws.path();
  auto st = ws.remove();
  cr_assert(st.ok(), "%s", st.ok() ? "" : st.error().message().c_str());
  cr_assert(!exists_nofollow(p));
}
