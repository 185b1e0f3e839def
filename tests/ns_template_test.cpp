// The namespace template (ns_template.hpp): root runs without binds share
// one prepared mount-tree base and one empty network namespace, and still
// cannot reach each other; a broken or stale template is rebuilt, old ones
// are dropped, and --loopback keeps a network namespace of the run's own.
// The guarantees themselves are observed in the template by
// container_template_test (container_test.cpp with the helpers staged).
#define CONTAINER_TEST_STAGED 1
#include <dirent.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <set>

#include "container_support.hpp"
#include "corral/ns_template.hpp"

using namespace corral;
using namespace container_test;
using corral_test::TempDir;

namespace {

#define SKIP_UNLESS_TEMPLATE()                                                                       \
  do {                                                                                               \
    SKIP_UNLESS_CONTAINER();                                                                         \
    if (geteuid() != 0) cr_skip_test("not root: rootless runs build their namespaces per run");      \
    if (host().landlock_abi < 6)                                                                     \
      cr_skip_test("Landlock ABI %d < 6: no abstract-unix scoping, so no shared network namespace", \
                   host().landlock_abi);                                                             \
  } while (0)

// Tests in this binary run two at a time. Those that change what the
// others see (clear the host's templates, mount under /usr) or count the
// host's mounts take this lock exclusively; those that run in the host's
// templates or mount private template roots of their own, shared.
struct TemplatesLock {
  int fd;
  explicit TemplatesLock(bool exclusive) : fd(open("/tmp/corral-ns-template-test.lock", O_CREAT | O_RDWR | O_CLOEXEC, 0600)) {
    cr_assert(fd >= 0);
    flock(fd, exclusive ? LOCK_EX : LOCK_SH);
  }
  ~TemplatesLock() { close(fd); }
};

std::map<std::string, std::string> observations(const Result& r) {
  std::map<std::string, std::string> out;
  std::istringstream in(r.stdout_capture.text);
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

// "net:[4026532290]" for an nsfs file on the host.
std::string ns_link_of(const std::string& kind, const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return "?";
  return kind + ":[" + std::to_string(st.st_ino) + "]";
}

// The mount/network templates under root (users/ holds the user namespaces).
std::vector<std::string> template_dirs(const std::string& root) {
  std::vector<std::string> out;
  DIR* d = opendir(root.c_str());
  while (dirent* e = d ? readdir(d) : nullptr)
    if (e->d_name[0] != '.' && std::strcmp(e->d_name, "users") != 0) out.push_back(root + "/" + e->d_name);
  if (d) closedir(d);
  return out;
}

std::size_t mounts_under(const std::string& dir) {
  std::string text = corral_test::read_file("/proc/self/mountinfo");
  std::size_t n = 0, pos = 0;
  while ((pos = text.find(" " + dir + "/", pos)) != std::string::npos) ++n, ++pos;
  return n;
}

// A split tree for `uid` with `ws` as the workspace: what open_ns_template takes.
SplitMountTree split_for(const std::string& ws, uid_t uid) {
  MountTreeSpec spec;
  spec.workspace(ws);
  EtcIdentity who;
  who.uid = who.gid = uid;
  auto split = prepare_split_mount_tree(spec, who);
  cr_assert(split.ok(), "%s", split.ok() ? "" : split.error().message().c_str());
  return std::move(*split);
}

// The private template roots a test made, unmounted in its .fini even when
// an assertion ended the test early (else their nsfs mounts outlive it).

// A private template root that anyone may write to: refused as a root.
std::string world_writable_root(const TempDir& dir) {
  std::string r = private_root(dir);
  cr_assert_eq(mkdir(r.c_str(), 0777), 0);
  cr_assert_eq(chmod(r.c_str(), 0777), 0);
  return r;
}

}  // namespace

Test(ns_template, runs_share_the_templates_network_namespace_and_copy_its_mounts) {
  SKIP_UNLESS_TEMPLATE();
  TemplatesLock lock(false);
  Harness h;
  // In flight together: namespace inode numbers are reused once one is
  // freed, so only namespaces alive at once can be told apart by them.
  const std::vector<std::string> show = {"sh", "-c",
                                         "echo netns=$(readlink /proc/self/ns/net); "
                                         "echo mntns=$(readlink /proc/self/ns/mnt); sleep 0.5"};
  std::shared_ptr<Result> ra, rb;
  RunHandle ha = submit_boxed(h, show, &ra);
  RunHandle hb = submit_boxed(h, show, &rb);
  while (!ra || !rb) cr_assert(h.sup->run_once(1).ok());
  const Result& a = *ra;
  const Result& b = *rb;
  cr_assert_eq(a.outcome, Outcome::exited, "%s", a.detail.c_str());
  cr_assert_eq(b.outcome, Outcome::exited, "%s", b.detail.c_str());
  auto oa = observations(a), ob = observations(b);
  cr_assert_eq(oa["netns"], ob["netns"], "two runs, two network namespaces: %s %s", oa["netns"].c_str(),
               ob["netns"].c_str());
  cr_assert_neq(oa["mntns"], ob["mntns"], "two runs share one mount namespace: %s", oa["mntns"].c_str());
  // The shared one is a template's, and no run is in the template's own
  // mount namespace (each has a copy).
  bool found = false;
  for (const auto& dir : template_dirs(std::string(kTemplateRoot))) {
    if (ns_link_of("net", dir + "/net") != oa["netns"]) continue;
    found = true;
    cr_assert_neq(ns_link_of("mnt", dir + "/mnt"), oa["mntns"], "a run is in the template's mount namespace");
  }
  cr_assert(found, "the runs' %s is no template's under %s", oa["netns"].c_str(), std::string(kTemplateRoot).c_str());
}

Test(ns_template, one_run_cannot_connect_to_anothers_abstract_unix_socket) {
  SKIP_UNLESS_TEMPLATE();
  TemplatesLock lock(false);
  std::string name = "corral-test-" + std::to_string(getpid());
  std::string inside = helpers_dir() + "/inside";
  TempDir out;
  std::string out_path = out.path() + "/listener.out";
  int fd = open(out_path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  cr_assert(fd >= 0);
  pid_t listener =
      start_cli({"run", "--tier", "container", "--input", inside, "--", "/workspace/inside", "abstract-listen", name, "6"}, fd);
  close(fd);
  // The listener's run shares our runs' network namespace: wait until it listens.
  for (int i = 0; i < 200 && !contains(corral_test::read_file(out_path), "listening"); ++i) usleep(20000);
  std::string heard = corral_test::read_file(out_path);
  cr_assert(contains(heard, "listening"), "the listener did not start: %s", heard.c_str());
  // Within its own run the socket works, so the refusal below is the scoping.
  cr_assert(contains(heard, "self_connect=ok"), "%s", heard.c_str());

  Harness h;
  Result r = h.run(boxed({"/helpers/inside", "abstract-connect", name, "2"}));
  kill(listener, SIGTERM);
  int st;
  waitpid(listener, &st, 0);
  cr_assert_eq(r.outcome, Outcome::exited, "%s", r.detail.c_str());
  cr_assert_eq(observations(r)["abstract_connect"], "EPERM", "another run's abstract socket: %s",
               r.stdout_capture.text.c_str());
}

Test(ns_template, loopback_gives_a_run_its_own_network_namespace_with_lo_up) {
  SKIP_UNLESS_TEMPLATE();
  TemplatesLock lock(false);
  Harness h;
  Result shared = h.run(boxed({"/helpers/inside", "ns"}));
  Request own = boxed({"/helpers/inside", "ns"});
  own.loopback = true;
  Result r = h.run(std::move(own));
  cr_assert_eq(r.outcome, Outcome::exited, "%s", r.detail.c_str());
  cr_assert_neq(observations(r)["netns"], observations(shared)["netns"], "--loopback ran in the shared namespace");
  in_port_t port = 0;
  int l = corral_test::tcp_listen(&port);
  cr_assert(l >= 0);
  Request obs = boxed({"/helpers/inside", "observe", std::to_string(port)});
  obs.loopback = true;
  Result o = h.run(std::move(obs));
  close(l);
  // lo is up and empty: the connect reaches it and nobody listens there.
  EXPECT_EMPTY(mismatches(o, {{"net_devices", "lo"}, {"connect", "ECONNREFUSED"}, {"uid", "65534"}}));
}

Test(ns_template, a_template_is_made_once_reused_and_rebuilt_when_broken, .fini = drop_private_roots) {
  SKIP_UNLESS_TEMPLATE();
  // Shared: the test that counts the host's mounts would see this root's.
  // Static, so held until this test's process ends, past the unmount in .fini.
  static TemplatesLock lock(false);
  TempDir root, ws;
  std::string r = private_root(root);
  SplitMountTree t = split_for(ws.path(), 65534);
  auto first = open_ns_template(t.base, t.fingerprint, r);
  cr_assert(first.ok(), "%s", first.ok() ? "" : first.error().message().c_str());
  cr_assert(first->created);
  auto again = open_ns_template(t.base, t.fingerprint, r);
  cr_assert(again.ok());
  cr_assert(!again->created, "an intact template was made again");
  cr_assert_eq(again->dir, first->dir);
  cr_assert_eq(mounts_under(r), 2u, "a template is two nsfs mounts");

  // A template whose mount namespace file is no longer an nsfs (a reboot,
  // a crash mid-way, someone's umount) is rebuilt, not trusted.
  cr_assert_eq(umount2((first->dir + "/mnt").c_str(), MNT_DETACH), 0, "%s", strerror(errno));
  auto rebuilt = open_ns_template(t.base, t.fingerprint, r);
  cr_assert(rebuilt.ok(), "%s", rebuilt.ok() ? "" : rebuilt.error().message().c_str());
  cr_assert(rebuilt->created, "a broken template was reused");
  cr_assert_eq(mounts_under(r), 2u);

  // Another identity in /etc is another base, so another template.
  SplitMountTree other = split_for(ws.path(), 4242);
  auto second = open_ns_template(other.base, other.fingerprint, r);
  cr_assert(second.ok());
  cr_assert_neq(second->dir, first->dir);

  auto removed = remove_ns_templates(r);
  cr_assert(removed.ok());
  cr_assert_eq(*removed, 2);
  cr_assert_eq(mounts_under(r), 0u, "remove_ns_templates left mounts");
  cr_assert(template_dirs(r).empty());
}

Test(ns_template, at_most_the_kept_number_of_templates_stays, .fini = drop_private_roots) {
  SKIP_UNLESS_TEMPLATE();
  // Shared: the test that counts the host's mounts would see this root's.
  // Static, so held until this test's process ends, past the unmount in .fini.
  static TemplatesLock lock(false);
  TempDir root, ws;
  std::string r = private_root(root);
  for (int i = 0; i < kKeptTemplates + 3; ++i) {
    SplitMountTree t = split_for(ws.path(), static_cast<uid_t>(5000 + i));
    auto made = open_ns_template(t.base, t.fingerprint, r);
    cr_assert(made.ok(), "template %d: %s", i, made.ok() ? "" : made.error().message().c_str());
  }
  cr_assert_eq(template_dirs(r).size(), static_cast<std::size_t>(kKeptTemplates));
  cr_assert_eq(mounts_under(r), static_cast<std::size_t>(2 * kKeptTemplates));
  (void)remove_ns_templates(r);
}

Test(ns_template, a_template_root_anyone_else_can_write_is_refused, .fini = drop_private_roots) {
  SKIP_UNLESS_TEMPLATE();
  // Shared: the test that counts the host's mounts would see this root's.
  // Static, so held until this test's process ends, past the unmount in .fini.
  static TemplatesLock lock(false);
  TempDir root, ws;
  std::string r = world_writable_root(root);
  SplitMountTree t = split_for(ws.path(), 65534);
  auto made = open_ns_template(t.base, t.fingerprint, r);
  cr_assert(!made.ok(), "a world-writable template root was used");
  cr_assert(contains(made.error().message(), "writable by nobody else"), "%s", made.error().message().c_str());
  // The run does not fail for it: it is built per run, and says why.
}

Test(ns_template, a_changed_host_file_makes_a_new_base) {
  SKIP_UNLESS_TEMPLATE();
  TempDir ws, src;
  // A bind source replaced by rename (as ldconfig replaces ld.so.cache)
  // keeps its path but not its inode: the fingerprint must change with it.
  std::string f = src.path() + "/file";
  corral_test::write_file(f, "one");
  MountTreeSpec spec;
  spec.workspace(ws.path());
  spec.rootfs(src.path());
  EtcIdentity who;
  auto a = prepare_split_mount_tree(spec, who);
  cr_assert(a.ok(), "%s", a.ok() ? "" : a.error().message().c_str());
  corral_test::write_file(f + ".new", "two");
  cr_assert_eq(rename((f + ".new").c_str(), f.c_str()), 0);
  auto b = prepare_split_mount_tree(spec, who);
  cr_assert(b.ok());
  cr_assert_neq(a->fingerprint, b->fingerprint, "the same fingerprint after the file was replaced");
  cr_assert_eq(a->base.describe(), b->base.describe());
}

Test(ns_template, the_host_base_fingerprint_names_each_bind_as_stat_sees_it) {
  // The host tree's entries are lstat'ed once and their identity reused
  // (no realpath, no second stat): every bind line of the fingerprint must
  // still be a canonical host path with the dev:ino stat(2) gives it now.
  TempDir ws;
  MountTreeSpec spec;
  spec.workspace(ws.path());
  EtcIdentity who;
  auto split = prepare_split_mount_tree(spec, who);
  cr_assert(split.ok(), "%s", split.ok() ? "" : split.error().message().c_str());
  int binds = 0;
  std::size_t at = 0;
  const std::string& fp = split->fingerprint;
  while (at < fp.size()) {
    std::size_t nl = fp.find('\n', at);
    std::string line = fp.substr(at, nl - at);
    at = nl == std::string::npos ? fp.size() : nl + 1;
    if (line.empty() || line[0] != '/') continue;  // a step line starts with its op number
    std::size_t sp = line.rfind(' ');
    std::string host = line.substr(0, sp);
    struct stat st;
    cr_assert_eq(stat(host.c_str(), &st), 0, "stat '%s'", host.c_str());
    std::string id = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
    cr_expect_eq(line.substr(sp + 1), id, "'%s': fingerprint %s, stat %s", host.c_str(), line.substr(sp + 1).c_str(),
                 id.c_str());
    char canon[PATH_MAX];
    cr_assert_neq(realpath(host.c_str(), canon), nullptr, "realpath '%s'", host.c_str());
    cr_expect_str_eq(canon, host.c_str(), "a bind source that is not canonical");
    ++binds;
  }
  cr_assert_gt(binds, 5, "only %d binds in the host base:\n%s", binds, fp.c_str());
}

namespace {

// A directory under /usr (which the host base binds) that a test mounts a
// tmpfs on; unmounted and removed in .fini however the test ended.
std::string g_host_mount;
void drop_host_mount() {
  if (g_host_mount.empty()) return;
  umount2(g_host_mount.c_str(), MNT_DETACH);
  rmdir(g_host_mount.c_str());
  g_host_mount.clear();
}

void make_host_mount_point() {
  g_host_mount = "/usr/local/corral-test-mount-" + std::to_string(getpid());
  if (mkdir(g_host_mount.c_str(), 0755) != 0) {
    std::string why = strerror(errno);
    g_host_mount.clear();
    cr_skip_test("cannot make a mount point under /usr/local: %s", why.c_str());
  }
}

}  // namespace

Test(ns_template, the_base_names_the_host_mounts_under_what_it_binds, .fini = drop_host_mount) {
  SKIP_UNLESS_TEMPLATE();
  TemplatesLock lock(true);  // its tmpfs under /usr is a changed host to the other tests' runs
  TempDir ws;
  make_host_mount_point();
  const std::string before = split_for(ws.path(), 65534).fingerprint;
  cr_assert(!contains(before, "mount " + g_host_mount + " "), "%s", before.c_str());
  cr_assert_eq(mount("tmpfs", g_host_mount.c_str(), "tmpfs", 0, "size=64k"), 0, "%s", strerror(errno));
  const std::string mounted = split_for(ws.path(), 65534).fingerprint;
  cr_assert(contains(mounted, "mount " + g_host_mount + " "), "a tmpfs under /usr is not in the base:\n%s",
            mounted.c_str());
  cr_assert_eq(umount2(g_host_mount.c_str(), 0), 0, "%s", strerror(errno));
  cr_assert_eq(split_for(ws.path(), 65534).fingerprint, before, "the base did not go back once the tmpfs was gone");
}

Test(ns_template, a_run_sees_the_hosts_mounts_under_a_bound_path_as_they_are_now, .fini = drop_host_mount) {
  // The template binds /usr as it was when it was made. A run after a host
  // mount under /usr must see the mount, and a run after the unmount must
  // not see what was there (the template's copy would keep it alive).
  SKIP_UNLESS_TEMPLATE();
  TemplatesLock lock(true);  // the host's mounts and templates change under the other tests
  make_host_mount_point();
  Harness h;
  const std::vector<std::string> look = {"sh", "-c", "cat " + g_host_mount + "/file 2>/dev/null || echo absent"};
  auto seen = [&] {
    Result r = h.run(boxed(look));
    cr_assert_eq(r.outcome, Outcome::exited, "%s", r.detail.c_str());
    std::string out = r.stdout_capture.text;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  };
  cr_assert_eq(seen(), "absent");  // the template for this host exists from here on
  const auto dirs = [] {
    auto v = template_dirs(std::string(kTemplateRoot));
    return std::set<std::string>(v.begin(), v.end());
  };
  const std::set<std::string> before = dirs();
  cr_assert_eq(mount("tmpfs", g_host_mount.c_str(), "tmpfs", 0, "size=64k"), 0, "%s", strerror(errno));
  corral_test::write_file(g_host_mount + "/file", "present");
  std::string now = seen();
  cr_assert_eq(now, "present", "a tmpfs mounted under /usr after the template was made: the run saw '%s'",
               now.c_str());
  std::vector<std::string> made;  // the template that shows the tmpfs
  for (const auto& d : dirs())
    if (!before.count(d)) made.push_back(d);
  cr_assert_eq(made.size(), 1u, "%zu templates were made for the mounted host", made.size());
  cr_assert_eq(umount2(g_host_mount.c_str(), 0), 0, "%s", strerror(errno));
  now = seen();
  cr_assert_eq(now, "absent", "a tmpfs unmounted from /usr: the run still saw '%s'", now.c_str());
  // The template of the mounted host went with the next one made for the
  // same spec: it held the unmounted tmpfs alive.
  struct stat st;
  cr_assert_neq(lstat(made[0].c_str(), &st), 0, "%s, made while the tmpfs was mounted, is still there", made[0].c_str());
}

Test(ns_template, runs_in_the_template_leave_no_mount_cgroup_or_workspace) {
  SKIP_UNLESS_TEMPLATE();
  TemplatesLock lock(true);  // it counts the host's mounts: no other test may mount meanwhile
  Harness h;
  (void)h.run(boxed({"true"}));  // the template exists from here on
  std::size_t mounts = mount_count();
  std::size_t templates = template_dirs(std::string(kTemplateRoot)).size();
  for (int i = 0; i < 50; ++i) {
    Request r = boxed({"true"});
    r.limits.set(Limit::memory_bytes, 64ull << 20);
    Result res = h.run(std::move(r));
    cr_assert_eq(res.outcome, Outcome::exited, "run %d: %s", i, res.detail.c_str());
  }
  cr_assert_eq(mount_count(), mounts, "host mounts changed");
  cr_assert_eq(template_dirs(std::string(kTemplateRoot)).size(), templates, "runs made new templates");
  cr_assert_eq(my_run_cgroups(), 0u);
  cr_assert_eq(h.leftovers(), 0u);
}

Test(ns_template, the_cli_lists_and_clears_the_templates) {
  SKIP_UNLESS_TEMPLATE();
  TemplatesLock lock(true);
  Harness h;
  (void)h.run(boxed({"true"}));
  cr_assert_eq(cli({"templates"}), 0);
  cr_assert_eq(cli({"templates", "--bogus"}), 2);
  cr_assert_eq(cli({"templates", "--clear"}), 0);
  cr_assert(template_dirs(std::string(kTemplateRoot)).empty(), "--clear left templates");
  auto users = list_userns_templates();
  cr_assert(users.ok() && users->empty(), "--clear left user namespace templates");
  cr_assert_eq(mounts_under(std::string(kTemplateRoot)), 0u);
  // The next run makes its templates again: the base and its user namespace.
  Result r = h.run(boxed({"/helpers/inside", "ns"}));
  cr_assert_eq(r.outcome, Outcome::exited, "%s", r.detail.c_str());
  cr_assert_eq(template_dirs(std::string(kTemplateRoot)).size(), 1u);
  users = list_userns_templates();
  cr_assert(users.ok() && users->size() == 1u, "%zu user namespace templates", users.ok() ? users->size() : 0);
}

// Once the child is cloned it has its own copies: the supervisor keeps no
// fd of a template's namespaces while the run goes on.
Test(ns_template, the_supervisor_holds_no_template_namespace_while_a_run_goes_on) {
  SKIP_UNLESS_TEMPLATE();
  TemplatesLock lock(false);
  Harness h;
  (void)h.run(boxed({"true"}));  // the templates exist from here on
  // A namespace is its (device, inode); an fd opened through a bind shows
  // the bind's path in /proc/self/fd, so compare what stat says.
  auto id_of = [](const std::string& path) {
    struct stat st {};
    return stat(path.c_str(), &st) == 0 ? std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) : "?";
  };
  std::set<std::string> template_ns;
  for (const auto& dir : template_dirs(std::string(kTemplateRoot)))
    for (const char* kind : {"/mnt", "/net"}) template_ns.insert(id_of(dir + kind));
  auto users = list_userns_templates();
  cr_assert(users.ok() && !users->empty());
  for (const auto& f : *users) template_ns.insert(id_of(f));

  std::shared_ptr<Result> res;
  RunHandle handle = submit_boxed(h, {"sleep", "0.5"}, &res);
  cr_assert(h.sup->run_once(0.1).ok());
  std::vector<std::string> held;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = d ? readdir(d) : nullptr) {
    std::string fd = std::string("/proc/self/fd/") + e->d_name;
    if (e->d_name[0] != '.' && template_ns.count(id_of(fd))) held.push_back(fd);
  }
  if (d) closedir(d);
  cr_assert(held.empty(), "the supervisor holds %zu template namespace fd(s), e.g. %s", held.size(),
            held.empty() ? "" : held[0].c_str());
  while (!res) cr_assert(h.sup->run_once(1).ok());
  cr_assert_eq(res->outcome, Outcome::exited, "%s", res->detail.c_str());
}

// The program's user namespace: one per id mapping, made once, with the
// maps the run asked for, entered by setns, rebuilt when broken, and at
// most kKeptUserTemplates kept.
Test(ns_template, a_user_namespace_template_maps_one_id_pair_and_is_reused, .fini = drop_private_roots) {
  SKIP_UNLESS_TEMPLATE();
  // Shared: the test that counts the host's mounts would see this root's.
  // Static, so held until this test's process ends, past the unmount in .fini.
  static TemplatesLock lock(false);
  TempDir root;
  std::string r = private_root(root);
  UserNsIds ids{65534, 234567, 65533, 234568};
  auto first = open_userns_template(ids, r);
  cr_assert(first.ok(), "%s", first.ok() ? "" : first.error().message().c_str());
  auto listed = list_userns_templates(r);
  cr_assert(listed.ok() && listed->size() == 1u);
  cr_assert_eq((*listed)[0], r + "/users/65534-234567-65533-234568");
  cr_assert_eq(mounts_under(r), 1u);
  auto again = open_userns_template(ids, r);
  cr_assert(again.ok());
  cr_assert_eq(mounts_under(r), 1u, "an intact user namespace template was made again");

  // Entered, it shows the maps, and a process there has no power on the host.
  int fd = first->get();
  EXPECT_EMPTY(corral_test::in_child(false, [fd]() -> std::string {
    if (setns(fd, CLONE_NEWUSER) != 0) return std::string("setns: ") + strerror(errno);
    std::string uid_map = corral_test::read_file("/proc/self/uid_map");
    std::string gid_map = corral_test::read_file("/proc/self/gid_map");
    if (uid_map.find("65534") == std::string::npos || uid_map.find("234567") == std::string::npos)
      return "uid_map: " + uid_map;
    if (gid_map.find("65533") == std::string::npos || gid_map.find("234568") == std::string::npos)
      return "gid_map: " + gid_map;
    if (setresgid(65533, 65533, 65533) != 0 || setresuid(65534, 65534, 65534) != 0)
      return std::string("the inside ids: ") + strerror(errno);
    if (mkdir("/root/corral-userns-probe", 0700) == 0) return "host root's directory was writable";
    return "";
  }));

  // Broken (unmounted): rebuilt, not trusted.
  cr_assert_eq(umount2((r + "/users/65534-234567-65533-234568").c_str(), MNT_DETACH), 0);
  auto rebuilt = open_userns_template(ids, r);
  cr_assert(rebuilt.ok(), "%s", rebuilt.ok() ? "" : rebuilt.error().message().c_str());
  cr_assert_eq(mounts_under(r), 1u);

  for (int i = 0; i < kKeptUserTemplates + 2; ++i)
    cr_assert(open_userns_template(UserNsIds{65534, 300000 + i, 65534, 300000 + i}, r).ok(), "template %d", i);
  listed = list_userns_templates(r);
  cr_assert(listed.ok());
  cr_assert_eq(listed->size(), static_cast<std::size_t>(kKeptUserTemplates));
  auto removed = remove_ns_templates(r);
  cr_assert(removed.ok());
  cr_assert_eq(*removed, kKeptUserTemplates);
  cr_assert_eq(mounts_under(r), 0u);
}

// Live templates stand in for the container probe: a mount template shows
// mount namespaces and pivot_root, a user namespace template shows user
// namespaces; with neither the probe tries it all in a child.
Test(ns_template, live_templates_stand_in_for_the_container_probe, .fini = drop_private_roots) {
  SKIP_UNLESS_TEMPLATE();
  // Shared: the test that counts the host's mounts would see this root's.
  // Static, so held until this test's process ends, past the unmount in .fini.
  static TemplatesLock lock(false);
  TempDir root, ws;
  std::string r = private_root(root);
  auto probe = [&r]() {
    return corral_test::in_child(false, [&r]() -> std::string {
      HostFacts facts = probe_host(/*with_containers=*/false);
      probe_container_facts(facts, r);
      if (!facts.user_namespaces || !facts.pivot_root) return "refused: " + facts.container_probe;
      return facts.container_probe_how;
    });
  };
  std::string none = probe();
  cr_assert(contains(none, "pivot_root") && contains(none, "throwaway"), "%s", none.c_str());
  SplitMountTree t = split_for(ws.path(), 65534);
  cr_assert(open_ns_template(t.base, t.fingerprint, r).ok());
  std::string mount_only = probe();
  cr_assert(contains(mount_only, "a user namespace; mount namespaces and pivot_root shown by"), "%s",
            mount_only.c_str());
  cr_assert(open_userns_template(UserNsIds{65534, 200000, 65534, 200000}, r).ok());
  std::string both = probe();
  cr_assert(contains(both, "shown by the namespace templates") && contains(both, "/users/"), "%s", both.c_str());
}

Test(ns_template, a_template_that_cannot_be_had_builds_the_run_per_run_and_says_why, .fini = drop_private_roots) {
  SKIP_UNLESS_TEMPLATE();
  // Shared: the test that counts the host's mounts would see this root's.
  // Static, so held until this test's process ends, past the unmount in .fini.
  static TemplatesLock lock(false);
  TempDir root, ws;
  std::string r = world_writable_root(root);
  NamespaceSpec spec;
  spec.map(UserNsMap{65534, 65534, 200000, 200000});
  spec.mounts(MountTreeSpec().workspace(ws.path()));
  spec.use_template(true).template_root(r);
  auto ns = prepare_namespaces(spec);
  cr_assert(ns.ok(), "%s", ns.ok() ? "" : ns.error().message().c_str());
  cr_assert(!ns->in_template());
  cr_assert(contains(ns->template_error(), "writable by nobody else"), "%s", ns->template_error().c_str());
  cr_assert(ns->clone_flags() & CLONE_NEWNET, "the fallback has no network namespace of its own");
  cr_assert(contains(ns->mount_tree()->describe(), "pivot_root"), "the fallback has no full tree");
  // And with a usable root the same spec enters the template.
  TempDir good;
  spec.template_root(private_root(good));
  auto in = prepare_namespaces(spec);
  cr_assert(in.ok());
  cr_assert(in->in_template());
  cr_assert(!(in->clone_flags() & (CLONE_NEWNET | CLONE_NEWUSER | CLONE_NEWNS)));
}

Test(ns_template, the_loopback_job_field_is_a_boolean) {
  auto on = request_from_json(R"({"argv":["true"],"tier":"container","loopback":true})");
  cr_assert(on.ok(), "%s", on.ok() ? "" : on.error().message().c_str());
  cr_assert(on->loopback);
  auto bad = request_from_json(R"({"argv":["true"],"tier":"container","loopback":"yes"})");
  cr_assert(!bad.ok());
  cr_assert(contains(bad.error().message(), "field 'loopback': must be true or false"), "%s", bad.error().message().c_str());
}
