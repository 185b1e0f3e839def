// The mount tree on real children: what is visible, what is read-only, /dev,
// /etc, binds, rootfs, size caps, failure records, and what prepare refuses.
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <pwd.h>

#include "sandbox_harness.hpp"

using namespace corral;
using namespace harness;

namespace {

constexpr uid_t kOutside = 54321;

uid_t outside_uid(bool rootless) { return rootless ? own_uid() : kOutside; }
gid_t outside_gid(bool rootless) { return rootless ? own_gid() : kOutside; }

// A directory the sandbox's outside id owns.
struct OwnedDir {
  corral_test::TempDir dir;
  explicit OwnedDir(bool rootless) {
    (void)chown(dir.path().c_str(), outside_uid(rootless), outside_gid(rootless));
  }
  const std::string& path() const { return dir.path(); }
};

NamespaceSpec spec_with(bool rootless, MountTreeSpec tree) {
  NamespaceSpec spec;
  spec.map({1000, 1000, outside_uid(rootless), outside_gid(rootless)}).mounts(std::move(tree));
  return spec;
}

// "ro,nosuid,nodev"-style flags of the mount holding `path`, from statvfs.
std::string mount_flags(const char* path) {
  struct statvfs v;
  if (statvfs(path, &v) != 0) return "!" + errname(errno);
  std::string s = (v.f_flag & ST_RDONLY) ? "ro" : "rw";
  if (v.f_flag & ST_NOSUID) s += ",nosuid";
  if (v.f_flag & ST_NODEV) s += ",nodev";
  if (v.f_flag & ST_NOEXEC) s += ",noexec";
  return s;
}

std::string errno_of_stat(const char* path) {
  struct stat st;
  return outcome(lstat(path, &st));
}

// What the host-mode root looks like: the host's system entries that exist,
// plus what the tree provides itself.
std::string expected_root_listing() {
  std::vector<std::string> names = {"dev", "etc", "proc", "tmp", "workspace"};
  for (const char* n : {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}) {
    struct stat st;
    std::string p = std::string("/") + n;
    if (lstat(p.c_str(), &st) == 0 && (S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode))) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ",") + n;
  return s;
}

int filesystem_probe(int out) {
  say(out, "root", listing("/"));
  say(out, "dev", listing("/dev"));
  say(out, "stat /root", errno_of_stat("/root"));
  say(out, "stat /home", errno_of_stat("/home"));
  say(out, "stat /var", errno_of_stat("/var"));
  say(out, "stat /.oldroot", errno_of_stat("/.oldroot"));
  say(out, "create /usr/x", try_create("/usr/corral-probe"));
  say(out, "create /etc/x", try_create("/etc/corral-probe"));
  say(out, "append /etc/passwd", outcome(open("/etc/passwd", O_WRONLY | O_APPEND)));
  say(out, "create /x", try_create("/corral-probe"));
  say(out, "create /dev/x", try_create("/dev/corral-probe"));
  say(out, "create /tmp/x", try_create("/tmp/corral-probe"));
  say(out, "create /dev/shm/x", try_create("/dev/shm/corral-probe"));
  say(out, "create /workspace/x", try_create("/workspace/corral-probe"));
  say(out, "write /dev/null", try_create("/dev/null"));
  char zeros[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  int z = open("/dev/zero", O_RDONLY);
  say(out, "read /dev/zero", z >= 0 && read(z, zeros, 8) == 8 && !memchr(zeros, 1, 8) ? "zeros" : errname(errno));
  for (const char* p : {"/", "/usr", "/etc", "/etc/ld.so.cache", "/workspace", "/tmp", "/dev", "/dev/shm", "/proc"})
    say(out, std::string("flags ") + p, mount_flags(p));
  char cwd[256];
  say(out, "cwd", getcwd(cwd, sizeof cwd) ? cwd : errname(errno));
  return 0;
}

std::string check_filesystem(bool rootless) {
  OwnedDir ws(rootless);
  auto s = run(spec_with(rootless, MountTreeSpec().workspace(ws.path())), filesystem_probe);
  std::string ldcache_flags = access("/etc/ld.so.cache", F_OK) == 0 ? "ro,nosuid,nodev" : "!ENOENT";
  return expect(s, {{"root", expected_root_listing()},
                    {"dev", "fd,full,null,ptmx,pts,random,shm,stderr,stdin,stdout,tty,urandom,zero"},
                    {"stat /root", "ENOENT"},
                    {"stat /home", "ENOENT"},
                    {"stat /var", "ENOENT"},
                    {"stat /.oldroot", "ENOENT"},
                    {"create /usr/x", "EROFS"},
                    {"create /etc/x", "EROFS"},
                    {"append /etc/passwd", "EROFS"},
                    {"create /x", "EROFS"},
                    {"create /dev/x", "EROFS"},
                    {"create /tmp/x", "ok"},
                    {"create /dev/shm/x", "ok"},
                    {"create /workspace/x", "ok"},
                    {"write /dev/null", "ok"},
                    {"read /dev/zero", "zeros"},
                    {"flags /", "ro,nosuid,nodev"},
                    {"flags /usr", "ro,nosuid,nodev"},
                    {"flags /etc", "ro,nosuid,nodev"},
                    {"flags /etc/ld.so.cache", ldcache_flags},
                    {"flags /workspace", "rw,nosuid,nodev"},
                    {"flags /tmp", "rw,nosuid,nodev"},
                    {"flags /dev", "ro,nosuid,noexec"},
                    {"flags /dev/shm", "rw,nosuid,nodev"},
                    {"flags /proc", "rw,nosuid,nodev,noexec"},
                    {"cwd", "/workspace"}});
}

}  // namespace

Test(mount_tree, rootful_view_read_only_and_dev) {
  CORRAL_SKIP_UNLESS_ROOT();
  EXPECT_EMPTY(check_filesystem(false));
}

Test(mount_tree, rootless_view_read_only_and_dev) {
  CORRAL_SKIP_UNLESS_ROOTLESS_USERNS();
  EXPECT_EMPTY(as_user(true, [] { return check_filesystem(true); }));
}

Test(mount_tree, etc_is_minimal_and_names_the_sandbox_user) {
  CORRAL_SKIP_UNLESS_ROOT();
  auto s = run(spec_with(false, MountTreeSpec()), [](int out) {
    struct passwd* pw = getpwuid(getuid());
    say(out, "user", pw ? pw->pw_name : "<none>");
    say(out, "home", pw ? pw->pw_dir : "<none>");
    say(out, "etc", listing("/etc"));
    say(out, "hostname file", corral_test::read_file("/etc/hostname"));
    return 0;
  });
  auto kv = s.kv();
  EXPECT_EMPTY(expect(s, {{"user", "sandbox"}, {"home", "/workspace"}, {"hostname file", "corral"}}));
  for (const char* secret : {"shadow", "gshadow", "ssh", "resolv.conf", "sudoers"})
    cr_assert(("," + kv["etc"] + ",").find(std::string(",") + secret + ",") == std::string::npos,
              "/etc shows %s: %s", secret, kv["etc"].c_str());
  cr_assert(kv["etc"].find("passwd") != std::string::npos, "%s", kv["etc"].c_str());
}

Test(mount_tree, binds_read_only_and_writable_dirs_and_files) {
  CORRAL_SKIP_UNLESS_ROOT();
  OwnedDir in(false), out_dir(false);
  corral_test::write_file(in.dir / "data.txt", "hello");
  corral_test::write_file(in.dir / "single.conf", "one file");
  MountTreeSpec tree;
  tree.ro_bind(in.path(), "/data/in").bind(out_dir.path(), "/out").ro_bind(in.dir / "single.conf", "/etc/single.conf");
  auto s = run(spec_with(false, tree), [](int out) {
    say(out, "read", corral_test::read_file("/data/in/data.txt"));
    say(out, "single", corral_test::read_file("/etc/single.conf"));
    say(out, "create in", try_create("/data/in/new"));
    say(out, "create out", try_create("/out/made-inside"));
    say(out, "cwd", get_current_dir_name());
    return 0;
  });
  EXPECT_EMPTY(expect(s, {{"read", "hello"},
                          {"single", "one file"},
                          {"create in", "EROFS"},
                          {"create out", "ok"},
                          {"cwd", "/"}}));
  cr_assert_eq(access((out_dir.dir / "made-inside").c_str(), F_OK), 0);
}

Test(mount_tree, read_only_covers_submounts_of_a_bind) {
  CORRAL_SKIP_UNLESS_ROOT();
  OwnedDir dir(false);
  mkdir((dir.dir / "sub").c_str(), 0755);
  // The submount is made in a forked child's private mount namespace, and
  // the sandbox is started from there, so the host never sees it.
  EXPECT_EMPTY(in_child(false, [&] {
    if (unshare(CLONE_NEWNS) || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) ||
        mount("tmpfs", (dir.dir / "sub").c_str(), "tmpfs", 0, "size=64k,mode=0777"))
      return std::string("setting up the submount: ") + strerror(errno);
    auto s = run(spec_with(false, MountTreeSpec().ro_bind(dir.path(), "/data")), [](int out) {
      say(out, "top", try_create("/data/x"));
      say(out, "sub", try_create("/data/sub/x"));
      say(out, "sub flags", mount_flags("/data/sub"));
      return 0;
    });
    return expect(s, {{"top", "EROFS"}, {"sub", "EROFS"}, {"sub flags", "ro,nosuid,nodev"}});
  }));
}

Test(mount_tree, rootfs_replaces_the_host_system) {
  CORRAL_SKIP_UNLESS_ROOT();
  corral_test::TempDir root;
  chmod(root.path().c_str(), 0755);  // the child mounts as the outside id
  mkdir((root / "etc").c_str(), 0755);
  mkdir((root / "data").c_str(), 0755);
  mkdir((root / "proc").c_str(), 0755);  // provided fresh, not bound
  corral_test::write_file(root / "etc/os-release", "ID=corral-test\n");
  symlink("data", (root / "lnk").c_str());
  auto s = run(spec_with(false, MountTreeSpec().rootfs(root.path())), [](int out) {
    char buf[64] = {};
    say(out, "root", listing("/"));
    say(out, "os-release", corral_test::read_file("/etc/os-release"));
    say(out, "lnk", readlink("/lnk", buf, sizeof buf - 1) > 0 ? buf : errname(errno));
    say(out, "stat /usr", errno_of_stat("/usr"));
    say(out, "create /data/x", try_create("/data/x"));
    say(out, "pids", listing("/proc").substr(0, 3));
    return 0;
  });
  EXPECT_EMPTY(expect(s, {{"root", "data,dev,etc,lnk,proc,tmp"},
                          {"os-release", "ID=corral-test"},
                          {"lnk", "data"},
                          {"stat /usr", "ENOENT"},
                          {"create /data/x", "EROFS"},
                          {"pids", "2,a"}}));  // the program, then proc's own entries (acpi, ...): pid 1 is not its to see
}

Test(mount_tree, tmp_is_size_capped) {
  CORRAL_SKIP_UNLESS_ROOT();
  auto s = run(spec_with(false, MountTreeSpec().tmp_bytes(1 << 20).cwd("/tmp")), [](int out) {
    std::string chunk(64 << 10, 'x');
    int fd = open("/tmp/big", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    std::string result = "no limit hit";
    for (int i = 0; i < 64; ++i)
      if (write(fd, chunk.data(), chunk.size()) < 0) {
        result = errname(errno);
        break;
      }
    say(out, "fill /tmp", result);
    say(out, "cwd", get_current_dir_name());
    return 0;
  });
  EXPECT_EMPTY(expect(s, {{"fill /tmp", "ENOSPC"}, {"cwd", "/tmp"}}));
}

// ---- failure records ---------------------------------------------------------

namespace {

// Prepare a tree that binds a fresh host directory at /data, let `sabotage`
// change the host between prepare and apply, and return the child's error.
std::string error_after(const std::function<void(const std::string& src)>& sabotage, std::string* src_out) {
  static corral_test::TempDir base;  // lives until the process ends; one per test process
  chmod(base.path().c_str(), 0755);  // the child mounts as the outside id
  std::string src = base / "src";
  mkdir(src.c_str(), 0755);
  *src_out = src;
  auto ns = prepare_namespaces(spec_with(false, MountTreeSpec().ro_bind(src, "/data")));
  if (!ns) return "prepare: " + ns.error().message();
  sabotage(src);
  auto s = run_prepared(*ns, [](int) { return 0; });
  if (s.pid1.code != 125) return "expected the child to fail (125), got " + std::to_string(s.pid1.code);
  return s.error;
}

}  // namespace

Test(mount_tree, child_failure_names_the_step_and_the_call) {
  CORRAL_SKIP_UNLESS_ROOT();
  std::string src;
  std::string msg = error_after([](const std::string& p) { rmdir(p.c_str()); }, &src);
  std::string want = "' 'bind /data (ro, from " + src + ")': openat2: No such file or directory";
  cr_assert(msg.rfind("namespaces: mount tree: step ", 0) == 0 && msg.find(want.substr(1)) != std::string::npos,
            "%s", msg.c_str());
}

Test(mount_tree, a_source_swapped_for_a_symlink_is_refused) {
  CORRAL_SKIP_UNLESS_ROOT();
  std::string src;
  std::string msg = error_after(
      [](const std::string& p) {
        rmdir(p.c_str());
        symlink("/root", p.c_str());  // would expose the host's /root
      },
      &src);
  cr_assert(msg.find("openat2: Too many levels of symbolic links") != std::string::npos, "%s", msg.c_str());
}

Test(mount_tree, a_source_the_outside_id_cannot_reach_is_refused_by_the_kernel) {
  // The child binds as the mapped outside id: its capabilities in the user
  // namespace do not cover host inodes owned by unmapped ids, so it needs
  // search permission on every ancestor of a source, like that uid would.
  CORRAL_SKIP_UNLESS_ROOT();
  corral_test::TempDir secret;  // 0700, root
  std::string inner = secret / "inner";
  mkdir(inner.c_str(), 0755);
  auto s = run(spec_with(false, MountTreeSpec().ro_bind(inner, "/secret")), [](int) { return 0; });
  cr_assert(s.error.find("'bind /secret (ro, from " + inner + ")': openat2: Permission denied") !=
                std::string::npos,
            "error: '%s'", s.error.c_str());
}

Test(mount_tree, steps_are_listed_in_order) {
  corral_test::TempDir ws;
  auto tree = prepare_mount_tree(MountTreeSpec().workspace(ws.path()), EtcIdentity{});
  cr_assert(tree.ok(), "%s", tree.error().message().c_str());
  std::string d = tree->describe();
  auto pos = [&](const std::string& what) { return d.find(what); };
  cr_assert_eq(pos("0 make every mount private"), 0u, "%s", d.c_str());
  cr_assert_lt(pos("pivot_root"), pos("bind /usr (ro, from /usr)"), "%s", d.c_str());
  cr_assert_lt(pos("mount proc on /proc"), pos("detach the host's root"), "%s", d.c_str());
  cr_assert_lt(pos("detach the host's root"), pos("make / read-only"), "%s", d.c_str());
  cr_assert(d.find("chdir /workspace\n") == d.size() - std::string("chdir /workspace\n").size(), "%s", d.c_str());
  // A copy stays valid on its own: strings are arena offsets, not pointers.
  PreparedMountTree copy = *tree;
  tree = Error::invalid("gone");
  cr_assert_str_eq(copy.str(copy.steps().front().what), "make every mount private");
}

// ---- what prepare refuses ------------------------------------------------------

namespace {

std::string refused(const MountTreeSpec& spec, const std::string& needle) {
  auto t = prepare_mount_tree(spec, EtcIdentity{});
  if (t.ok()) return "accepted a tree it should refuse (" + needle + ")";
  if (t.error().message().find(needle) == std::string::npos)
    return "message '" + t.error().message() + "' does not mention '" + needle + "'";
  return "";
}

}  // namespace

Test(mount_tree, refuses_bad_targets_by_name) {
  EXPECT_EMPTY(refused(MountTreeSpec().ro_bind("/usr", "usr2"),
                       "mount tree: ro_bind '/usr' -> 'usr2': must be an absolute path"));
  EXPECT_EMPTY(refused(MountTreeSpec().workspace("/tmp", "ws"), "workspace at 'ws': must be an absolute path"));
  EXPECT_EMPTY(refused(MountTreeSpec().bind("/usr", "/a/../etc"), "'.' and '..' are not allowed"));
  EXPECT_EMPTY(refused(MountTreeSpec().bind("/usr", "//"), "cannot bind over /"));
  EXPECT_EMPTY(refused(MountTreeSpec().ro_bind("/usr", "/.oldroot/x"), "/.oldroot is reserved"));
  EXPECT_EMPTY(refused(MountTreeSpec().cwd("work"), "cwd 'work': must be an absolute path"));
  EXPECT_EMPTY(refused(MountTreeSpec().workspace("/tmp", "/"), "workspace cannot be mounted on /"));
}

Test(mount_tree, refuses_bad_sources_by_name) {
  EXPECT_EMPTY(refused(MountTreeSpec().ro_bind("/nonexistent/x", "/x"),
                       "ro_bind '/nonexistent/x' -> '/x': source '/nonexistent/x': No such file or directory"));
  EXPECT_EMPTY(refused(MountTreeSpec().bind("/dev/null", "/x"), "neither a directory nor a regular file"));
  EXPECT_EMPTY(refused(MountTreeSpec().workspace("/etc/hostname"), "workspace '/etc/hostname' is not a directory"));
  EXPECT_EMPTY(refused(MountTreeSpec().rootfs("/nonexistent/root"), "rootfs '/nonexistent/root'"));
  EXPECT_EMPTY(refused(MountTreeSpec().rootfs("/etc/hostname"), "is not a directory"));
  EXPECT_EMPTY(refused(MountTreeSpec().staging_dir("/nonexistent"), "staging dir '/nonexistent'"));
  EXPECT_EMPTY(refused(MountTreeSpec().staging_dir("/"), "must be a directory other than /"));
}

Test(mount_tree, refuses_tiny_tmpfs_sizes) {
  EXPECT_EMPTY(refused(MountTreeSpec().tmp_bytes(0), "tmp_bytes must be at least 4096"));
  EXPECT_EMPTY(refused(MountTreeSpec().root_bytes(100), "root_bytes"));
  EXPECT_EMPTY(refused(MountTreeSpec().shm_bytes(1), "shm_bytes"));
}
