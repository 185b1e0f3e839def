// The namespace templates' host stamp (ns_template.hpp): a run whose host
// has not changed finds its template from the record without a scan; any
// change to a scanned directory, or a host entry replaced, sends it back
// to the scan, so a record never names a stale base.
#define CONTAINER_TEST_STAGED 1
#include <dirent.h>
#include <sys/stat.h>

#include "container_support.hpp"
#include "corral/ns_template.hpp"

using namespace corral;
using namespace container_test;
using corral_test::TempDir;

namespace {

#define SKIP_UNLESS_TEMPLATE()                                                                  \
  do {                                                                                          \
    SKIP_UNLESS_CONTAINER();                                                                    \
    if (geteuid() != 0) cr_skip_test("not root: rootless runs build their namespaces per run"); \
  } while (0)


std::size_t records_under(const std::string& root) {
  std::size_t n = 0;
  DIR* d = opendir(root.c_str());
  while (dirent* e = d ? readdir(d) : nullptr) n += std::strncmp(e->d_name, ".stamp-", 7) == 0;
  if (d) closedir(d);
  return n;
}

MountTreeSpec spec_for(const std::string& ws) {
  MountTreeSpec spec;
  spec.workspace(ws);
  return spec;
}

// A stamped time must be over a second older than the scan that records it.
void let_the_clock_pass() { usleep(1100 * 1000); }

struct Stamped {
  std::size_t records = 0;          // records under the root after the recording
  std::optional<NsTemplate> found;  // what a run that skips the scan finds then
};

// Records the stamp of `dirs` for `made` and looks it up, as a run would.
// The host's mount list is part of the stamp, so a mount another suite
// makes or removes meanwhile (run-tests runs suites side by side) refuses
// the record or the lookup: a try that found nothing while the list
// changed does not count, and is made again (up to 50 times). One that
// found nothing with the list still is the answer. Skips the test on a
// kernel without listmount(2).
Stamped record_and_look_up(const std::string& key, const std::vector<std::string>& dirs, const NsTemplate& made,
                           const std::string& root) {
  Stamped out;
  for (int tries = 0; tries < 50; ++tries) {
    HostStampStart start = begin_host_stamp();
    if (!start.mounts) cr_skip_test("no listmount(2) (Linux 6.8): runs always scan");
    record_host_stamp(key, dirs, start, made, root);
    out.records = records_under(root);
    out.found = open_stamped_ns_template(key, root);
    if (out.found || begin_host_stamp().mounts == start.mounts) return out;
    remove_host_stamps(root);
    usleep(20 * 1000);
  }
  return out;
}

// A template made from a full scan in a private root, and the key a run
// that skips the scan looks it up by; `watched` stands in for a host
// directory the test can change.
struct MadeTemplate {
  TempDir root, ws, watched;
  std::string r = private_root(root);
  std::string key;
  NsTemplate made;
  MadeTemplate() {
    EtcIdentity who;
    auto full = prepare_split_mount_tree(spec_for(ws.path()), who);
    auto skip = prepare_split_mount_tree(spec_for(ws.path()), who, HostScan::skip);
    cr_assert(full.ok() && skip.ok());
    auto t = open_ns_template(full->base, full->fingerprint, r);
    cr_assert(t.ok(), "%s", t.ok() ? "" : t.error().message().c_str());
    key = skip->fingerprint;
    made = std::move(*t);
  }
};

}  // namespace

Test(ns_template_stamp, the_skip_scan_names_the_spec_and_looks_at_no_host_entry) {
  TempDir ws;
  EtcIdentity who;
  auto skip = prepare_split_mount_tree(spec_for(ws.path()), who, HostScan::skip);
  cr_assert(skip.ok(), "%s", skip.ok() ? "" : skip.error().message().c_str());
  cr_assert(skip->scanned_dirs.empty());
  cr_assert(!contains(skip->fingerprint, "/.oldroot/usr"), "the skip scan bound a host entry:\n%s",
            skip->fingerprint.c_str());
  auto full = prepare_split_mount_tree(spec_for(ws.path()), who);
  cr_assert(full.ok());
  cr_assert_eq(skip->per_run.describe(), full->per_run.describe(), "the per-run half depends on the scan");
  for (const char* dir : {"/", "/etc", "/dev"})
    cr_expect(std::find(full->scanned_dirs.begin(), full->scanned_dirs.end(), dir) != full->scanned_dirs.end(),
              "%s is not among the scanned directories", dir);
  // Another identity is another spec, so another key.
  EtcIdentity other;
  other.uid = other.gid = 4242;
  auto skip_other = prepare_split_mount_tree(spec_for(ws.path()), other, HostScan::skip);
  cr_assert(skip_other.ok());
  cr_assert_neq(skip->fingerprint, skip_other->fingerprint);
  // A rootfs tree is its entries: never without a scan.
  MountTreeSpec rootfs = spec_for(ws.path());
  rootfs.rootfs(ws.path());
  cr_assert(!prepare_split_mount_tree(rootfs, who, HostScan::skip).ok());
}

Test(ns_template_stamp, a_record_finds_the_template_until_a_scanned_directory_changes, .fini = drop_private_roots) {
  SKIP_UNLESS_TEMPLATE();
  MadeTemplate t;
  const std::string& r = t.r;
  const auto& watched = t.watched;
  const std::string& key = t.key;
  const NsTemplate& made = t.made;
  cr_assert(!open_stamped_ns_template(key, r), "a template found with no record");

  // Stamped: a directory of the test's own instead of the host's, so the
  // test can change it.
  let_the_clock_pass();
  auto [records, found] = record_and_look_up(key, {watched.path()}, made, r);
  cr_assert_eq(records, 1u, "no record written");
  cr_assert(found, "the record did not find the template");
  cr_assert_eq(found->dir, made.dir);
  cr_assert(found->mnt && found->net);

  // An entry renamed into a scanned directory (as ldconfig replaces
  // ld.so.cache): the record no longer holds.
  corral_test::write_file(watched.path() + "/new.tmp", "x");
  cr_assert_eq(rename((watched.path() + "/new.tmp").c_str(), (watched.path() + "/new").c_str()), 0);
  cr_assert(!open_stamped_ns_template(key, r), "a record held after its directory changed");
}

// A run's template is named for its family (ns_template_name with the
// spec's key): a record of such a template is written and finds it, as one
// of an unnamed family does.
Test(ns_template_stamp, a_record_finds_a_template_named_for_its_family, .fini = drop_private_roots) {
  SKIP_UNLESS_TEMPLATE();
  TempDir root, ws, watched;
  const std::string r = private_root(root);
  EtcIdentity who;
  auto full = prepare_split_mount_tree(spec_for(ws.path()), who);
  auto skip = prepare_split_mount_tree(spec_for(ws.path()), who, HostScan::skip);
  cr_assert(full.ok() && skip.ok());
  const std::string key = skip->fingerprint;
  auto made = open_ns_template(full->base, full->fingerprint, r, key);
  cr_assert(made.ok(), "%s", made.ok() ? "" : made.error().message().c_str());
  const std::string name = made->dir.substr(made->dir.rfind('/') + 1);
  cr_assert_eq(name, ns_template_name(full->fingerprint, key));
  cr_assert(is_ns_template_name(name), "'%s'", name.c_str());
  cr_assert_eq(name.size(), 25u, "'%s' is not a family's name", name.c_str());

  let_the_clock_pass();
  auto [records, found] = record_and_look_up(key, {watched.path()}, *made, r);
  cr_assert_eq(records, 1u, "no record written for the family's template %s", name.c_str());
  cr_assert(found, "the record did not find the family's template");
  cr_assert_eq(found->dir, made->dir);
}

Test(ns_template_stamp, a_scanned_directory_that_is_missing_is_stamped_by_its_parent, .fini = drop_private_roots) {
  // A host without /etc/ssl: the scan looked for entries below it, so it
  // is among the scanned directories, but has no times of its own. It may
  // not keep the record from being written, and making it must undo it.
  SKIP_UNLESS_TEMPLATE();
  MadeTemplate t;
  const std::string& r = t.r;
  const auto& watched = t.watched;
  const std::string& key = t.key;
  const NsTemplate& made = t.made;
  let_the_clock_pass();
  const std::string absent = watched.path() + "/absent";
  cr_assert(record_and_look_up(key, {watched.path(), absent}, made, r).found, "a missing directory kept the record out");
  cr_assert_eq(mkdir(absent.c_str(), 0755), 0);
  cr_assert(!open_stamped_ns_template(key, r), "a record held after the missing directory was made");
}

Test(ns_template_stamp, a_directory_changed_just_before_the_scan_is_not_recorded, .fini = drop_private_roots) {
  SKIP_UNLESS_TEMPLATE();
  MadeTemplate t;
  const std::string& r = t.r;
  const auto& watched = t.watched;
  const std::string& key = t.key;
  const NsTemplate& made = t.made;
  // Changed within the second before the scan: a later change in the same
  // clock tick could leave the same times, so nothing is recorded.
  corral_test::write_file(watched.path() + "/fresh", "x");
  HostStampStart start = begin_host_stamp();
  record_host_stamp(key, {watched.path()}, start, made, r);
  cr_assert_eq(records_under(r), 0u, "a racy stamp was recorded");
  cr_assert(!open_stamped_ns_template(key, r));
}

Test(ns_template_stamp, a_replaced_host_entry_gives_the_next_run_a_new_base, .fini = drop_private_roots) {
  // End to end through prepare_namespaces: run 1 makes the template and
  // its record; a host entry the base binds is replaced by rename (a new
  // inode, the same bytes, as ldconfig and package managers replace
  // files); run 2 must scan again and get a template of the new base, not
  // the one the record named.
  SKIP_UNLESS_TEMPLATE();
  const std::string host_file = "/etc/magic.mime";
  struct stat before;
  if (lstat(host_file.c_str(), &before) != 0 || !S_ISREG(before.st_mode))
    cr_skip_test("the host has no regular %s to replace", host_file.c_str());
  TempDir root, ws;
  const std::string r = private_root(root);
  auto prepare = [&] {
    NamespaceSpec spec;
    spec.user(true).pid(true).net(true).mount(true);
    spec.map(UserNsMap{65534, 65534, 4242, 4242});
    spec.mounts(spec_for(ws.path()));
    spec.use_template(true).template_root(r);
    auto p = prepare_namespaces(spec);
    cr_assert(p.ok(), "%s", p.ok() ? "" : p.error().message().c_str());
    cr_assert(p->in_template(), "%s", p->template_error().c_str());
    return std::move(*p);
  };
  let_the_clock_pass();
  const std::string first = prepare().template_dir();
  // The run that made the template mounted its two nsfs files during its
  // scan, so it recorded nothing; the next one records.
  cr_assert_eq(prepare().template_dir(), first);
  if (records_under(r) == 0)
    cr_skip_test("no record was written (no listmount, or the host's /, /etc or /dev changed during the scan)");
  cr_assert_eq(prepare().template_dir(), first, "an unchanged host got another template");

  std::string copy = host_file + ".corral-test";
  corral_test::write_file(copy, corral_test::read_file(host_file));
  cr_assert_eq(chmod(copy.c_str(), before.st_mode & 07777), 0);
  cr_assert_eq(rename(copy.c_str(), host_file.c_str()), 0, "%s", strerror(errno));
  const std::string second = prepare().template_dir();
  cr_assert_neq(second, first, "the record named the template of the replaced file");
}
