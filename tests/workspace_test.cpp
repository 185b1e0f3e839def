#include "corral/workspace.hpp"

#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include <filesystem>
#include <initializer_list>

#include "corral/capture.hpp"
#include "../src/background_work.hpp"
#include "support.hpp"

using namespace corral;
namespace fs = std::filesystem;

namespace {

constexpr uid_t kOtherUid = 200000;  // an id no account uses; the supervisor's range lives up there

WorkspaceOptions options_for(const std::string& base_dir, std::optional<WorkspaceOwner> owner) {
  WorkspaceOptions o;
  o.base_dir = base_dir;
  o.owner = owner;
  return o;
}

Workspace make_ws(const corral_test::TempDir& base, std::optional<WorkspaceOwner> owner = std::nullopt) {
  cr_assert(!base.path().empty(), "no temporary directory");
  auto ws = Workspace::create(options_for(base.path(), owner));
  cr_assert(ws.ok(), "%s", ws.error().message().c_str());
  return std::move(ws).value();
}

// Writes a file below root, creating parents.
void put(const std::string& root, const std::string& rel, const std::string& data = "data") {
  fs::create_directories(fs::path(root + "/" + rel).parent_path());
  corral_test::write_file(root + "/" + rel, data);
}

bool exists_nofollow(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  cr_assert_eq(::lstat(path.c_str(), &st), 0, "stat %s", path.c_str());
  return st.st_mode & 07777;
}

template <class T>
void expect_error(const T& result, std::initializer_list<const char*> fragments) {
  cr_assert(!result.ok(), "expected an error mentioning '%s'", *fragments.begin());
  const std::string& msg = result.error().message();
  for (const char* f : fragments) cr_assert(msg.find(f) != std::string::npos, "'%s' not in: %s", f, msg.c_str());
}

// Runs fn in a forked child as an unprivileged uid (when we are root) so
// the non-root code paths run on this root-only machine too.
corral_test::ChildEnd as_unprivileged(const std::function<int()>& fn) {
  return corral_test::run_in_child_as(kOtherUid + 1, fn);
}

using corral_test::expect_child_ok;

}  // namespace

// ---- create / remove ------------------------------------------------------

Test(workspace, create_is_0700_with_home_and_tmp_and_is_removed) {
  corral_test::TempDir base;
  std::string path;
  {
    Workspace ws = make_ws(base);
    path = ws.path();
    cr_assert(fs::path(path).filename().string().rfind("corral-", 0) == 0, "%s", path.c_str());
    cr_assert_eq(fs::path(path).parent_path().string(), base.path());
    cr_assert_eq(mode_of(path), 0700u);
    cr_assert_eq(mode_of(ws.home()), 0700u);
    cr_assert_eq(mode_of(ws.tmp()), 0700u);
    cr_assert(fs::is_directory(ws.home()) && fs::is_directory(ws.tmp()));
    struct stat a {}, b {};
    cr_assert_eq(fstat(ws.dirfd(), &a), 0);
    cr_assert_eq(stat(path.c_str(), &b), 0);
    cr_assert(a.st_ino == b.st_ino, "dirfd is not the workspace");
    cr_assert(fcntl(ws.dirfd(), F_GETFD) & FD_CLOEXEC);
  }
  cr_assert(!exists_nofollow(path), "destructor left %s", path.c_str());
}

Test(workspace, default_base_is_tmpdir_and_bad_base_is_named) {
  corral_test::TempDir base;
  setenv("TMPDIR", base.path().c_str(), 1);
  auto ws = Workspace::create();
  cr_assert(ws.ok(), "%s", ws.error().message().c_str());
  cr_assert_eq(fs::path(ws->path()).parent_path().string(), base.path());
  expect_error(Workspace::create(options_for("/nonexistent-corral-base", std::nullopt)), {"/nonexistent-corral-base"});
}

Test(workspace, moving_keeps_the_tree_and_remove_is_idempotent) {
  corral_test::TempDir base;
  Workspace a = make_ws(base);
  std::string path = a.path();
  {
    Workspace b = std::move(a);
    cr_assert(fs::is_directory(path), "the moved-from object removed the tree");
    cr_assert(b.remove().ok());
    cr_assert(b.remove().ok(), "second remove");
    cr_assert(b.removed());
    expect_error(b.stage_bytes("x", "y"), {"already removed"});
  }
  cr_assert(!exists_nofollow(path));
}

// ---- staging --------------------------------------------------------------

Test(workspace, stage_bytes_and_file_copy_with_modes) {
  corral_test::TempDir base;
  Workspace ws = make_ws(base);
  ::umask(077);  // the requested mode must win over the umask
  cr_assert(ws.stage_bytes("in/sub/data.txt", "payload", 0644).ok());
  cr_assert_eq(corral_test::read_file(ws.path() + "/in/sub/data.txt"), "payload");
  cr_assert_eq(mode_of(ws.path() + "/in/sub/data.txt"), 0644u);

  std::string host = base / "host-script.sh";
  corral_test::write_file(host, "#!/bin/sh\necho hi\n");
  cr_assert_eq(chmod(host.c_str(), 0755), 0);
  auto st = ws.stage_file(host, "bin/run.sh");
  cr_assert(st.ok(), "%s", st.error().message().c_str());
  std::string staged = ws.path() + "/bin/run.sh";
  cr_assert_eq(corral_test::read_file(staged), "#!/bin/sh\necho hi\n");
  cr_assert_eq(mode_of(staged), 0755u);
  struct stat a {}, b {};
  cr_assert_eq(stat(host.c_str(), &a), 0);
  cr_assert_eq(stat(staged.c_str(), &b), 0);
  cr_assert(a.st_ino != b.st_ino && b.st_nlink == 1, "staged by link, not copy");

  expect_error(ws.stage_bytes("in/sub/data.txt", "again"), {"in/sub/data.txt", "already exists"});
}

Test(workspace, bad_input_names_are_refused_by_name) {
  corral_test::TempDir base;
  Workspace ws = make_ws(base);
  for (const char* bad : {"/etc/passwd", "a/../b", "..", "a//b", "a/", "./a", "a/./b"}) {
    expect_error(ws.stage_bytes(bad, "x"), {"input", bad});
  }
  expect_error(ws.stage_bytes("", "x"), {"input", "empty"});
  expect_error(ws.stage_bytes(std::string_view("a\0b", 3), "x"), {"NUL"});
  expect_error(ws.stage_bytes("suid", "x", 04755), {"'suid'", "mode"});
  expect_error(ws.stage_file("/nonexistent-corral-input", "in.txt"), {"'in.txt'", "/nonexistent-corral-input"});
  cr_assert(!exists_nofollow(ws.path() + "/b") && !exists_nofollow(base.path() + "/b"));
}

Test(workspace, stage_file_refuses_a_fifo_without_blocking, .timeout = 10) {
  corral_test::TempDir base;
  Workspace ws = make_ws(base);
  std::string fifo = base / "fifo";
  cr_assert_eq(mkfifo(fifo.c_str(), 0600), 0);
  expect_error(ws.stage_file(fifo, "in"), {"'in'", "not a regular file (fifo)"});
  expect_error(ws.stage_file(base.path(), "dir"), {"'dir'", "not a regular file (directory)"});
}

// A library caller's stage_file had no cap: a sparse terabyte someone else
// left (a previous run's output, an upload) was copied byte by byte into
// the workspace until its tmpfs or disk was full. Now it has the cap an
// --input file has, unless the caller names its own.
Test(workspace, stage_file_refuses_a_file_over_its_cap_and_copies_nothing, .timeout = 30) {
  corral_test::TempDir base;
  Workspace ws = make_ws(base);
  std::string sparse = base / "sparse.bin";
  corral_test::write_file(sparse, "");
  cr_assert_eq(truncate(sparse.c_str(), 1ll << 40), 0, "truncate: %s", strerror(errno));
  auto st = ws.stage_file(sparse, "big.bin");
  cr_assert(!st.ok(), "a 1 TiB file was staged");
  cr_assert_eq(st.error().code(), EFBIG, "%s", st.error().message().c_str());
  expect_error(st, {"'big.bin'", "artifact_bytes=67108864"});
  cr_assert(!exists_nofollow(ws.path() + "/big.bin"), "a partial copy was left");

  std::string small = base / "small.bin";
  corral_test::write_file(small, std::string(4096, 'x'));
  expect_error(ws.stage_file(small, "capped.bin", false, 4095), {"'capped.bin'", "4096 bytes", "artifact_bytes=4095"});
  cr_assert(!exists_nofollow(ws.path() + "/capped.bin"));
  auto fits = ws.stage_file(small, "fits.bin", false, 4096);
  cr_assert(fits.ok(), "%s", fits.error().message().c_str());
  cr_assert_eq(corral_test::read_file(ws.path() + "/fits.bin").size(), 4096u);
}

Test(workspace, staging_does_not_follow_a_planted_symlink) {
  corral_test::TempDir base, outside;
  Workspace ws = make_ws(base);
  cr_assert_eq(symlink(outside.path().c_str(), (ws.path() + "/link").c_str()), 0);
  expect_error(ws.stage_bytes("link/x", "x"), {"'link/x'", "symlink"});
  cr_assert_eq(symlink((outside / "target").c_str(), (ws.path() + "/leaf").c_str()), 0);
  expect_error(ws.stage_bytes("leaf", "x"), {"'leaf'", "symlink"});
  cr_assert(fs::is_empty(outside.path()), "something was written outside");
}

// Collection and the artifact root: tests/output_collect_test.cpp.

// ---- removal --------------------------------------------------------------

Test(workspace, removes_000_directories_as_root_and_as_an_ordinary_user) {
  corral_test::TempDir base;
  cr_assert_eq(chmod(base.path().c_str(), 01777), 0);
  // As ourselves (root here), then as an unprivileged uid in a child.
  for (bool unprivileged : {false, true}) {
    auto body = [&]() -> int {
      auto ws = Workspace::create(options_for(base.path(), std::nullopt));
      if (!ws) return 10;
      std::string p = ws->path();
      put(p, "locked/inner/f1", "x");
      put(p, "locked/f2", "y");
      put(p, "ro/f3", "z");
      if (chmod((p + "/locked/inner").c_str(), 0) || chmod((p + "/locked").c_str(), 0) ||
          chmod((p + "/ro").c_str(), 0500) || chmod(p.c_str(), 0))
        return 11;
      auto st = ws->remove();
      if (!st) {
        fprintf(stderr, "%s\n", st.error().message().c_str());
        return 12;
      }
      return exists_nofollow(p) ? 13 : 0;
    };
    if (unprivileged) expect_child_ok(as_unprivileged(body));
    else cr_assert_eq(body(), 0);
  }
}

Test(workspace, removes_files_of_another_uid_in_a_0500_directory) {
  CORRAL_SKIP_UNLESS_ROOT();
  corral_test::TempDir base;
  Workspace ws = make_ws(base);
  std::string p = ws.path();
  put(p, "d/f", "x");
  put(p, "d/e/g", "y");
  for (const char* rel : {"d/f", "d/e/g", "d/e", "d"})
    cr_assert_eq(lchown((p + "/" + rel).c_str(), kOtherUid, kOtherUid), 0);
  cr_assert_eq(chmod((p + "/d/e").c_str(), 0500), 0);
  cr_assert_eq(chmod((p + "/d").c_str(), 0500), 0);
  auto st = ws.remove();
  cr_assert(st.ok(), "%s", st.error().message().c_str());
  cr_assert(!exists_nofollow(p));
}

Test(workspace, removal_unlinks_symlinks_and_never_follows_them) {
  corral_test::TempDir base, outside;
  corral_test::write_file(outside / "keep.txt", "keep");
  fs::create_directories(outside / "dir");
  corral_test::write_file(outside / "dir/also.txt", "keep");
  Workspace ws = make_ws(base);
  std::string p = ws.path();
  fs::create_directories(p + "/sub");
  cr_assert_eq(symlink(outside.path().c_str(), (p + "/link").c_str()), 0);
  cr_assert_eq(symlink((outside / "dir").c_str(), (p + "/sub/link2").c_str()), 0);
  cr_assert_eq(symlink((outside / "keep.txt").c_str(), (p + "/sub/filelink").c_str()), 0);
  cr_assert_eq(chmod((outside / "dir").c_str(), 0555), 0);  // would be chmod'ed 0700 if followed
  auto st = ws.remove();
  cr_assert(st.ok(), "%s", st.error().message().c_str());
  cr_assert(!exists_nofollow(p));
  cr_assert_eq(corral_test::read_file(outside / "keep.txt"), "keep");
  cr_assert_eq(corral_test::read_file(outside / "dir/also.txt"), "keep");
  cr_assert_eq(mode_of(outside / "dir"), 0555u);
  chmod((outside / "dir").c_str(), 0755);
}

Test(workspace, removes_a_deep_tree_without_recursion) {
  corral_test::TempDir base;
  Workspace ws = make_ws(base);
  // 600 levels: more than the paths allowed by PATH_MAX from the root.
  int fd = open(ws.path().c_str(), O_RDONLY | O_DIRECTORY);
  for (int i = 0; i < 600; ++i) {
    cr_assert_eq(mkdirat(fd, "dddddddd", 0700), 0);
    int next = openat(fd, "dddddddd", O_RDONLY | O_DIRECTORY);
    close(fd);
    fd = next;
    cr_assert_geq(fd, 0);
  }
  cr_assert_eq(mkdirat(fd, "locked", 0), 0);
  close(fd);
  std::string p = ws.path();
  auto st = ws.remove();
  cr_assert(st.ok(), "%s", st.error().message().c_str());
  cr_assert(!exists_nofollow(p));
}

Test(workspace, a_moved_workspace_is_emptied_through_its_fd_and_the_impostor_left_alone) {
  corral_test::TempDir base;
  Workspace ws = make_ws(base);
  std::string p = ws.path(), moved = base / "moved";
  put(p, "out/f", "x");
  cr_assert_eq(rename(p.c_str(), moved.c_str()), 0);
  fs::create_directories(p + "/impostor");  // what an owner uid could plant at the old name
  expect_error(ws.remove(), {"moved or replaced"});
  cr_assert(ws.removed());
  cr_assert(fs::is_empty(moved), "contents not removed through the fd");
  cr_assert(fs::is_directory(p + "/impostor"), "removed something that is not ours");
}

Test(workspace, removes_many_files_in_one_directory) {
  corral_test::TempDir base;
  Workspace ws = make_ws(base);
  int dir = open((ws.path() + "/tmp").c_str(), O_RDONLY | O_DIRECTORY);
  for (int i = 0; i < 5000; ++i) close(openat(dir, ("f" + std::to_string(i)).c_str(), O_CREAT | O_WRONLY, 0600));
  close(dir);
  std::string p = ws.path();
  auto st = ws.remove();
  cr_assert(st.ok(), "%s", st.error().message().c_str());
  cr_assert(!exists_nofollow(p));
}

Test(workspace, owner_uid_owns_the_tree_and_staged_inputs) {
  CORRAL_SKIP_UNLESS_ROOT();
  corral_test::TempDir base;
  cr_assert_eq(chmod(base.path().c_str(), 0711), 0);  // the owner must reach its workspace
  Workspace ws = make_ws(base, WorkspaceOwner{kOtherUid, kOtherUid});
  cr_assert(ws.stage_bytes("in/deep/x.txt", "x").ok());
  for (const std::string& p : {ws.path(), ws.home(), ws.tmp(), ws.path() + "/in", ws.path() + "/in/deep",
                               ws.path() + "/in/deep/x.txt"}) {
    struct stat st {};
    cr_assert_eq(lstat(p.c_str(), &st), 0);
    cr_assert(st.st_uid == kOtherUid && st.st_gid == kOtherUid, "%s owned by %u:%u", p.c_str(), st.st_uid,
              st.st_gid);
  }
  // The owner can work in it.
  expect_child_ok(corral_test::run_in_child_as(kOtherUid, [&] {
    int fd = open((ws.home() + "/made-by-child").c_str(), O_CREAT | O_WRONLY, 0600);
    return fd >= 0 ? 0 : 1;
  }));
  std::string p = ws.path();
  cr_assert(ws.remove().ok());
  cr_assert(!exists_nofollow(p));
}

// A umask that takes the owner's own bits (0277 leaves the directories
// r-x, 0577 at mkdir time): the root, home/ and tmp/ still come out
// exactly 0700, and, as root, owned by the owner (the chmod path, which
// opens the directory for fchmod, and the chown through the O_PATH fd).
Test(workspace, a_umask_taking_the_owners_bits_still_gives_0700_and_the_owner) {
  corral_test::TempDir base;
  cr_assert_eq(chmod(base.path().c_str(), 0711), 0);
  const bool root = geteuid() == 0;
  std::optional<WorkspaceOwner> owner;
  if (root) owner = WorkspaceOwner{kOtherUid, kOtherUid};
  mode_t old = ::umask(0277);
  auto made = Workspace::create(options_for(base.path(), owner));
  ::umask(old);
  cr_assert(made.ok(), "%s", made.ok() ? "" : made.error().message().c_str());
  for (const std::string& p : {made->path(), made->home(), made->tmp()}) {
    struct stat st {};
    cr_assert_eq(lstat(p.c_str(), &st), 0, "%s", p.c_str());
    cr_expect_eq(st.st_mode & 07777, 0700u, "%s is %o", p.c_str(), st.st_mode & 07777);
    if (root)
      cr_expect(st.st_uid == kOtherUid && st.st_gid == kOtherUid, "%s owned by %u:%u", p.c_str(), st.st_uid,
                st.st_gid);
  }
  std::string p = made->path();
  cr_assert(made->remove().ok());
  cr_assert(!exists_nofollow(p));
}

// ---- shared base, released fds --------------------------------------------

namespace {

std::shared_ptr<const WorkspaceBase> open_base(const std::string& dir) {
  auto b = WorkspaceBase::open(dir);
  cr_assert(b.ok(), "%s", b.ok() ? "" : b.error().message().c_str());
  return *b;
}

Workspace make_shared_ws(const std::shared_ptr<const WorkspaceBase>& base,
                         std::optional<WorkspaceOwner> owner = std::nullopt) {
  WorkspaceOptions o;
  o.base = base;
  o.owner = owner;
  auto ws = Workspace::create(o);
  cr_assert(ws.ok(), "%s", ws.ok() ? "" : ws.error().message().c_str());
  return std::move(ws).value();
}

std::size_t entries(const std::string& dir) {
  std::size_t n = 0;
  for (auto it = fs::directory_iterator(dir); it != fs::directory_iterator(); ++it) ++n;
  return n;
}

}  // namespace

Test(workspace, a_base_only_we_can_write_is_used_as_is) {
  corral_test::TempDir dir;
  cr_assert_eq(chmod(dir.path().c_str(), 0755), 0);
  auto base = open_base(dir.path());
  cr_assert(!base->is_private());
  cr_assert_eq(base->path(), dir.path());
  Workspace ws = make_shared_ws(base);
  cr_assert_eq(fs::path(ws.path()).parent_path().string(), dir.path());
}

Test(workspace, a_base_others_can_write_gets_a_private_0711_directory) {
  corral_test::TempDir dir;
  cr_assert_eq(chmod(dir.path().c_str(), 01777), 0);
  std::string mine = dir / ("corral-" + std::to_string(geteuid()));
  {
    auto base = open_base(dir.path());
    cr_assert(base->is_private());
    cr_assert_eq(base->path(), mine);
    cr_assert_eq(mode_of(mine), 0711u);
    struct stat st {};
    cr_assert_eq(stat(mine.c_str(), &st), 0);
    cr_assert_eq(st.st_uid, geteuid());
    Workspace ws = make_shared_ws(base);
    cr_assert_eq(fs::path(ws.path()).parent_path().string(), mine);
    cr_assert(ws.remove().ok());
  }
  // Kept, empty, and used again.
  cr_assert_eq(entries(dir.path()), 1u);
  cr_assert_eq(entries(mine), 0u);
  cr_assert_eq(open_base(dir.path())->path(), mine);
}

Test(workspace, a_squatted_private_name_falls_back_to_a_fresh_directory) {
  corral_test::TempDir dir, elsewhere;
  cr_assert_eq(chmod(dir.path().c_str(), 01777), 0);
  std::string squat = dir / ("corral-" + std::to_string(geteuid()));
  cr_assert_eq(symlink(elsewhere.path().c_str(), squat.c_str()), 0);  // what another user could plant
  {
    auto base = open_base(dir.path());
    cr_assert(base->is_private());
    cr_assert_neq(base->path(), squat);
    cr_assert(fs::path(base->path()).filename().string().rfind(fs::path(squat).filename().string() + "-", 0) == 0,
              "%s", base->path().c_str());
    cr_assert_eq(mode_of(base->path()), 0711u);
    Workspace ws = make_shared_ws(base);
    cr_assert(ws.remove().ok());
  }
  cr_assert_eq(entries(dir.path()), 1u, "the fallback directory was left behind");
  cr_assert_eq(entries(elsewhere.path()), 0u, "followed the planted symlink");
}

Test(workspace, a_released_workspace_holds_no_fd_and_is_found_again) {
  corral_test::TempDir dir;
  cr_assert_eq(chmod(dir.path().c_str(), 0755), 0);
  auto base = open_base(dir.path());
  Workspace ws = make_shared_ws(base);
  put(ws.path(), "out/a.txt", "hello");
  int fd = ws.dirfd();
  cr_assert(ws.release_fd().ok());
  cr_assert(ws.released() && !ws.removed());
  cr_assert_eq(ws.dirfd(), -1);
  cr_assert(fcntl(fd, F_GETFD) < 0 && errno == EBADF, "the root fd is still open");
  cr_assert(ws.reacquire().ok());
  cr_assert_eq(corral_test::read_file(ws.path() + "/out/a.txt"), "hello");
  cr_assert(ws.dirfd() >= 0);
  // Released again, remove() finds it by itself.
  cr_assert(ws.release_fd().ok());
  std::string p = ws.path();
  cr_assert(ws.remove().ok());
  cr_assert(!exists_nofollow(p));
}

Test(workspace, release_needs_a_shared_base) {
  corral_test::TempDir dir;
  Workspace ws = make_ws(dir);
  expect_error(ws.release_fd(), {"shared WorkspaceBase"});
  cr_assert(!ws.released());
  cr_assert_geq(ws.dirfd(), 0);
}

Test(workspace, a_workspace_replaced_while_released_is_left_untouched) {
  corral_test::TempDir dir;
  cr_assert_eq(chmod(dir.path().c_str(), 0755), 0);
  auto base = open_base(dir.path());
  Workspace ws = make_shared_ws(base);
  std::string p = ws.path(), moved = dir / "moved";
  put(p, "keep", "x");
  cr_assert(ws.release_fd().ok());
  cr_assert_eq(rename(p.c_str(), moved.c_str()), 0);
  put(p, "impostor", "y");  // a new directory at the old name
  expect_error(ws.reacquire(), {"moved or replaced", p.c_str()});
  expect_error(ws.remove(), {"moved or replaced"});
  cr_assert(exists_nofollow(p + "/impostor"), "touched a directory that is not ours");
  cr_assert(exists_nofollow(moved + "/keep"));
}

Test(workspace, a_run_uid_cannot_rename_its_workspace_in_a_private_base) {
  CORRAL_SKIP_UNLESS_ROOT();
  corral_test::TempDir dir;
  cr_assert_eq(chmod(dir.path().c_str(), 01777), 0);
  auto base = open_base(dir.path());
  Workspace ws = make_shared_ws(base, WorkspaceOwner{kOtherUid, kOtherUid});
  cr_assert(ws.release_fd().ok());
  std::string p = ws.path(), elsewhere = base->path() + "/elsewhere";
  auto end = corral_test::run_in_child_as(kOtherUid, [&] {
    // It can work inside its workspace, but not rename it or add entries next to it.
    int fd = open((ws.home() + "/mine").c_str(), O_CREAT | O_WRONLY, 0600);
    if (fd < 0) return 1;
    if (rename(p.c_str(), elsewhere.c_str()) == 0 || errno != EACCES) return 2;
    if (mkdir(elsewhere.c_str(), 0700) == 0 || errno != EACCES) return 3;
    return 0;
  });
  cr_assert(end.exited && end.code == 0, "child: exit %d signal %d", end.code, end.signal);
  cr_assert(ws.reacquire().ok());
  cr_assert(ws.remove().ok());
  cr_assert(!exists_nofollow(p));
}

// ---- tmpfs workspaces (WorkspaceOptions::tmpfs_bytes; root) -----------------------

namespace {

Workspace make_tmpfs_ws(const corral_test::TempDir& base, std::uint64_t bytes,
                        std::optional<WorkspaceOwner> owner = std::nullopt) {
  WorkspaceOptions o;
  o.base_dir = base.path();
  o.owner = owner;
  o.tmpfs_bytes = bytes;
  auto ws = Workspace::create(o);
  cr_assert(ws.ok(), "%s", ws.error().message().c_str());
  return std::move(ws).value();
}

struct stat stat_at(int dirfd, const char* name) {
  struct stat st {};
  cr_assert_eq(::fstatat(dirfd, name, &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW), 0, "stat %s: %s", name,
               strerror(errno));
  return st;
}

}  // namespace

Test(workspace, a_tmpfs_workspace_has_no_path_its_owner_and_a_size_limit) {
  CORRAL_SKIP_UNLESS_ROOT();
  corral_test::TempDir base;
  Workspace ws = make_tmpfs_ws(base, 1 << 20, WorkspaceOwner{kOtherUid, kOtherUid});
  cr_assert(ws.on_tmpfs());
  cr_assert(ws.path().empty(), "a tmpfs workspace has a path: %s", ws.path().c_str());
  cr_assert_eq(std::distance(fs::directory_iterator(base.path()), fs::directory_iterator{}), 0,
               "a tmpfs workspace made something under the base");
  struct statfs sfs {};
  cr_assert_eq(::fstatfs(ws.dirfd(), &sfs), 0);
  cr_assert_eq(sfs.f_type, static_cast<decltype(sfs.f_type)>(TMPFS_MAGIC));
  cr_assert_eq(static_cast<std::uint64_t>(sfs.f_blocks) * sfs.f_bsize, 1u << 20);
  struct stat root = stat_at(ws.dirfd(), "");
  cr_assert_eq(root.st_mode & 07777, 0700u);
  cr_assert_eq(root.st_uid, kOtherUid);
  struct stat home = stat_at(ws.dirfd(), "home");
  cr_assert(S_ISDIR(home.st_mode) && home.st_uid == kOtherUid && (home.st_mode & 07777) == 0700);

  cr_assert(ws.stage_bytes("in/data.txt", "hello").ok());
  cr_assert_eq(stat_at(ws.dirfd(), "in/data.txt").st_uid, kOtherUid);
  // Past the size: ENOSPC, and the message names the limit.
  Status full = ws.stage_bytes("big.bin", std::string(2 << 20, 'x'));
  cr_assert(!full.ok());
  cr_assert_eq(full.error().code(), ENOSPC, "%s", full.error().message().c_str());
  expect_error(full, {"big.bin", "workspace_bytes=1048576"});

  cr_assert_eq(stat_at(ws.dirfd(), "in/data.txt").st_size, 5);

  // No name to be found by: release_fd keeps the fd.
  cr_assert(ws.release_fd().ok());
  cr_assert(!ws.released() && ws.dirfd() >= 0);
  cr_assert(ws.remove().ok());
  cr_assert(ws.removed());
  cr_assert(ws.remove().ok(), "remove is not idempotent");
}

Test(workspace, a_tmpfs_workspace_needs_a_size) {
  corral_test::TempDir base;
  WorkspaceOptions o;
  o.base_dir = base.path();
  o.tmpfs_bytes = 0;
  auto ws = Workspace::create(o);
  expect_error(ws, {"tmpfs", "size"});
}

// What a tmpfs workspace holds goes with its last reference: emptied after
// remove() (on the background thread), and the filesystem itself gone when
// the fd closes.
Test(workspace, removing_a_tmpfs_workspace_empties_it_through_its_fd) {
  CORRAL_SKIP_UNLESS_ROOT();
  corral_test::TempDir base;
  Workspace ws = make_tmpfs_ws(base, 1 << 20);
  cr_assert(ws.stage_bytes("a/b/c.txt", "x").ok());
  // A second reference (as a run's mount namespace would hold) sees the
  // contents go.
  UniqueFd other(::fcntl(ws.dirfd(), F_DUPFD_CLOEXEC, 0));
  cr_assert(other.valid());
  cr_assert(ws.remove().ok());
  cr_assert(ws.removed());
  corral::detail::wait_for_background_work();
  cr_assert_neq(::faccessat(other.get(), "a", F_OK, 0), 0, "remove() left the contents");
  cr_assert_neq(::faccessat(other.get(), "home", F_OK, 0), 0, "remove() left home/");
}

// Workspace names come from one getrandom per process mixed with a counter;
// a forked child inherits the sequence, so its next name is the parent's
// next. The name taken is skipped for fresh bits: both get a workspace.
Test(workspace, a_name_taken_by_a_forked_copy_is_skipped) {
  corral_test::TempDir base;
  Workspace first = make_ws(base);
  auto end = corral_test::run_in_child([&] {
    auto* kept = new Workspace(make_ws(base));  // left in place for the parent to meet
    return kept->path().empty() ? 1 : 0;
  });
  expect_child_ok(end);
  cr_assert_eq(entries(base.path()), 2u);
  Workspace second = make_ws(base);
  cr_assert_neq(second.path(), first.path());
  cr_assert_eq(entries(base.path()), 3u, "the parent's workspace did not get a name of its own");
}
