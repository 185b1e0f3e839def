// Where workspaces go by default (choose_workspace_base): a memory-backed
// place where the host has one, TMPDIR and an explicit base still winning,
// `corral enforcement` naming it, and a disk base still cleaned up.
#include <linux/magic.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cli_runner.hpp"
#include "corral/workspace.hpp"
#include "corral/workspace_base.hpp"
#include "support.hpp"

using namespace corral;
namespace fs = std::filesystem;

namespace {

long fs_type(const std::string& path) {
  struct statfs s {};
  return ::statfs(path.c_str(), &s) == 0 ? static_cast<long>(s.f_type) : -1;
}

// Whether the host offers a memory-backed default (see workspace.hpp).
bool host_has_memory_default() {
  if (geteuid() == 0) return true;  // corral mounts a tmpfs of its own
  const char* x = std::getenv("XDG_RUNTIME_DIR");
  return (x && *x == '/' && is_tmpfs(x)) || is_tmpfs("/dev/shm");
}

// A directory on a disk (not a tmpfs), 0711 so a run's uid can pass
// through it; "" when the host has none.
std::string disk_dir_for_test() {
  for (const char* parent : {"/var/tmp", "/tmp"}) {
    if (is_tmpfs(parent)) continue;
    std::string tmpl = std::string(parent) + "/corral-disk-test-XXXXXX";
    if (!mkdtemp(tmpl.data())) continue;
    chmod(tmpl.c_str(), 0711);
    return tmpl;
  }
  return "";
}

}  // namespace

Test(workspace_base, the_default_is_memory_backed_where_the_host_has_one) {
  unsetenv("TMPDIR");
  if (!host_has_memory_default()) cr_skip_test("no tmpfs at $XDG_RUNTIME_DIR or /dev/shm and not root");
  auto c = choose_workspace_base("");
  cr_assert_str_eq(c.source.c_str(), "default");
  cr_assert(c.tmpfs, "%s: %s", c.path.c_str(), c.note.c_str());
  cr_assert_eq(fs_type(c.path), static_cast<long>(TMPFS_MAGIC), "%s is not a tmpfs (f_type %lx)", c.path.c_str(),
               fs_type(c.path));
  if (geteuid() == 0) {
    // Root's is a mount of its own, not /run's (or /dev/shm's) space.
    cr_assert_str_eq(c.path.c_str(), kRootWorkspaceMount);
    struct stat mine {}, parent {};
    cr_assert(stat(kRootWorkspaceMount, &mine) == 0 && stat("/run/corral", &parent) == 0);
    cr_assert_neq(mine.st_dev, parent.st_dev, "%s is not a mount of its own", kRootWorkspaceMount);
    cr_assert_eq(mine.st_mode & 07777, 0711u);
  }
  // A workspace made with no base named lands there, on memory.
  auto ws = Workspace::create();
  cr_assert(ws.ok(), "%s", ws.error().message().c_str());
  cr_assert_eq(fs_type(ws->path()), static_cast<long>(TMPFS_MAGIC), "%s", ws->path().c_str());
  cr_assert_eq(fs_type(fs::path(ws->path()).parent_path()), static_cast<long>(TMPFS_MAGIC));
}

Test(workspace_base, tmpdir_and_an_explicit_base_win_over_the_default) {
  corral_test::TempDir dir;
  setenv("TMPDIR", dir.path().c_str(), 1);
  auto c = choose_workspace_base("");
  cr_assert_str_eq(c.path.c_str(), dir.path().c_str());
  cr_assert_str_eq(c.source.c_str(), "TMPDIR");
  auto ws = Workspace::create();
  cr_assert(ws.ok(), "%s", ws.error().message().c_str());
  cr_assert_eq(fs::path(ws->path()).parent_path().string(), dir.path());
  auto e = choose_workspace_base("/somewhere/else", /*prepare=*/false);
  cr_assert_str_eq(e.path.c_str(), "/somewhere/else");
  cr_assert_str_eq(e.source.c_str(), "workspace_base");
}

Test(workspace_base, enforcement_names_where_workspaces_go_and_what_backs_them) {
  unsetenv("TMPDIR");
  unsetenv("CORRAL_WORKSPACE_BASE");
  auto c = choose_workspace_base("", /*prepare=*/false);
  auto r = corral_test::run_cli({"enforcement"});
  cr_assert_eq(r.code, 0, "%s", r.err.c_str());
  cr_assert(r.out.find("workspace_base") != std::string::npos, "%s", r.out.c_str());
  cr_assert(r.out.find(c.path + " (default)") != std::string::npos, "%s", r.out.c_str());
  if (c.tmpfs) cr_assert(r.out.find("tmpfs (memory)") != std::string::npos, "%s", r.out.c_str());

  std::string disk = disk_dir_for_test();
  if (disk.empty()) cr_skip_test("no disk-backed directory on this host");
  auto d = corral_test::run_cli({"enforcement", "--json"}, {"CORRAL_WORKSPACE_BASE=" + disk});
  rmdir(disk.c_str());
  cr_assert_eq(d.code, 0, "%s", d.err.c_str());
  cr_assert(d.out.find(disk + " (workspace_base)") != std::string::npos, "%s", d.out.c_str());
  cr_assert(d.out.find("not a tmpfs (disk") != std::string::npos, "%s", d.out.c_str());
}

// A user who points workspaces at a disk gets them there and removed after,
// whatever the program left, by the CLI's run and by TMPDIR alike.
Test(workspace_base, a_disk_base_still_gets_its_workspaces_removed, .timeout = 60) {
  std::string disk = disk_dir_for_test();
  if (disk.empty()) cr_skip_test("no disk-backed directory on this host");
  const std::string script = "pwd; mkdir -p a/b/c; echo x > a/b/c/f; chmod 000 a/b; ln -s /etc/passwd link";
  for (const std::string& env : {"CORRAL_WORKSPACE_BASE=" + disk, "TMPDIR=" + disk}) {
    unsetenv("CORRAL_WORKSPACE_BASE");
    auto r = corral_test::run_cli({"run", "--", "/bin/sh", "-c", script}, {env});
    cr_assert_eq(r.code, 0, "%s: %s", env.c_str(), r.err.c_str());
    std::string pwd = r.out.substr(0, r.out.find('\n'));
    cr_assert(pwd.rfind(disk + "/", 0) == 0, "%s: the workspace %s is not under %s", env.c_str(), pwd.c_str(),
              disk.c_str());
    cr_assert(!fs::exists(fs::symlink_status(pwd)), "%s: %s is left behind", env.c_str(), pwd.c_str());
  }
  std::error_code ec;
  cr_assert(fs::is_empty(disk, ec), "%s holds something after the runs", disk.c_str());
  fs::remove_all(disk, ec);
}

// Played in a forked child in a mount namespace of its own, made private
// first (the host's table is never touched): `shape` sets the scene,
// choose_workspace_base then runs as a supervisor's start does, and the
// base's mountinfo line must have no "shared:N". The child's exit code:
// 0 private, 10 no namespace, 11 the scene failed, 12 not root's base, 13
// shared, 14 not mounted.
static int base_propagation_after_choice(const std::function<bool()>& shape) {
  pid_t p = fork();
  if (p == 0) {
    unsetenv("TMPDIR");
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(10);
    if (!shape()) _exit(11);
    auto choice = choose_workspace_base("", true);
    if (choice.path != kRootWorkspaceMount) _exit(12);
    std::string line;
    std::ifstream in("/proc/self/mountinfo");
    const std::string at = std::string(" ") + kRootWorkspaceMount + " ";
    while (std::getline(in, line))
      if (line.find(at) != std::string::npos) _exit(line.find(" shared:") == std::string::npos ? 0 : 13);
    _exit(14);
  }
  int status = 0;
  waitpid(p, &status, 0);
  cr_assert(WIFEXITED(status), "the child died");
  const int code = WEXITSTATUS(status);
  cr_assert_neq(code, 10, "could not make a private mount namespace");
  cr_assert_neq(code, 11, "could not set the scene");
  cr_assert_neq(code, 12, "the default base is not root's own");
  cr_assert_neq(code, 14, "the base was not mounted");
  return code;
}

// Root's own base is a private mount even where its parent is shared (a
// systemd host's /run): a run's workspace tmpfs mounted below it
// (WorkspaceOptions::tmpfs_on_host) then reaches no other mount namespace.
// "/" is made shared and the base unmounted, so that choose_workspace_base
// mounts it again. Without the MS_PRIVATE after the mount, the new base
// inherits "shared:N".
Test(workspace_base, roots_own_base_is_mounted_private_under_a_shared_parent) {
  if (geteuid() != 0) cr_skip_test("the base of its own is root's");
  const int code = base_propagation_after_choice([] {
    (void)umount2(kRootWorkspaceMount, MNT_DETACH);
    return mount(nullptr, "/", nullptr, MS_SHARED, nullptr) == 0;
  });
  cr_assert_eq(code, 0, "the base was mounted shared under a shared parent");
}

// A base already mounted shared (by an older corral under a shared /run,
// which left it so until reboot) is made private when a supervisor starts
// on it. On the old code it stayed shared.
Test(workspace_base, an_already_mounted_shared_base_is_made_private) {
  if (geteuid() != 0) cr_skip_test("the base of its own is root's");
  const int code = base_propagation_after_choice([] {
    (void)choose_workspace_base("", true);  // mounted, as a first run would
    return mount(nullptr, kRootWorkspaceMount, nullptr, MS_SHARED, nullptr) == 0;
  });
  cr_assert_eq(code, 0, "the base mounted shared stayed shared");
}
