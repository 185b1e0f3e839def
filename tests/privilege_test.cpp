#include "corral/privilege.hpp"
#include "corral/request.hpp"

#include <grp.h>
#include <linux/securebits.h>
#include <sched.h>
#include <sys/prctl.h>

#include <set>
#include <sstream>

#include "support.hpp"

using namespace corral;
using corral_test::run_in_child_reporting;

namespace {

PrivilegeDrop prepared(uid_t uid, gid_t gid) {
  auto drop = prepare_privilege_drop(uid, gid);
  cr_assert(drop.ok(), "%s", drop.ok() ? "" : drop.error().message().c_str());
  return *drop;
}

void expect_refused(uid_t uid, gid_t gid, const char* word) {
  auto drop = prepare_privilege_drop(uid, gid);
  cr_assert(!drop.ok(), "uid %u gid %u accepted", uid, gid);
  cr_expect(drop.error().message().find(word) != std::string::npos, "message '%s' does not mention '%s'",
            drop.error().message().c_str(), word);
}

// Drops in a child and reports the /proc/self/status id lines and whether
// setuid(0) still works ("setuid0 EPERM" when refused).
corral_test::ChildReport identity_after(const PrivilegeDrop& drop) {
  return run_in_child_reporting([&](int fd) {
    // Give the child supplementary groups (root here has none) so the drop
    // has something to clear.
    gid_t groups[] = {1, 2, 3};
    if (geteuid() == 0 && setgroups(3, groups) != 0) return 99;
    if (int err = apply_privilege_drop_in_child(drop)) return 100 + err;
    for (const char* key : {"Uid", "Gid", "Groups"})
      corral_test::report(fd, std::string(key) + "=" + corral_test::proc_status_field("self", key) + "\n");
    int r = setuid(0);
    corral_test::report(fd, std::string("setuid0=") + (r == 0 ? "ok" : strerrorname_np(errno)) + "\n");
    return 0;
  });
}

std::string field(const std::string& report, const std::string& key) {
  std::istringstream in(report);
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, key.size() + 1, key + "=") == 0) return line.substr(key.size() + 1);
  return "<missing " + key + ">";
}

void expect_field(const std::string& report, const std::string& key, const std::string& want) {
  std::string got = field(report, key);
  cr_expect_eq(got, want, "%s: got '%s', want '%s'", key.c_str(), got.c_str(), want.c_str());
}

}  // namespace

Test(privilege, child_drops_to_the_target_for_good) {
  CORRAL_SKIP_UNLESS_ROOT();
  auto r = identity_after(prepared(200123, 200124));
  cr_assert(r.end.exited && r.end.code == 0, "child exit %d signal %d", r.end.code, r.end.signal);
  expect_field(r.output, "Uid", "200123\t200123\t200123\t200123");
  expect_field(r.output, "Gid", "200124\t200124\t200124\t200124");
  expect_field(r.output, "Groups", "");
  expect_field(r.output, "setuid0", "EPERM");
}

Test(privilege, refuses_out_of_range_and_root_targets_by_number) {
  expect_refused(static_cast<uid_t>(-1), 1000, "uid 4294967295");
  expect_refused(1000, static_cast<gid_t>(-1), "gid 4294967295");
  // Root's own identity too: "dropping" to it would be a no-op that keeps
  // root and a full bounding set.
  expect_refused(0, 0, "uid 0");
  expect_refused(0, 200000, "uid 0 is root");
  expect_refused(200000, 0, "gid 0");
  expect_refused(0, 65534, "uid 0 is root");
  expect_refused(65534, 0, "gid 0");
}

// The drop without a prepared object refuses root's ids before touching
// any: as root, the child is still exactly root afterwards, not half
// dropped (gid 0 kept) and not "verified" as uid 0.
Test(privilege, drop_now_refuses_uid_0_and_gid_0) {
  CORRAL_SKIP_UNLESS_ROOT();
  auto r = run_in_child_reporting([&](int) {
    if (drop_privileges_now(0, 65534) != EINVAL) return 1;
    if (drop_privileges_now(65534, 0) != EINVAL) return 2;
    if (drop_privileges_now(0, 0) != EINVAL) return 3;
    if (getuid() != 0 || geteuid() != 0 || getgid() != 0) return 4;
    return drop_privileges_now(65534, 65534) == 0 && setresuid(0, 0, 0) != 0 && setresgid(0, 0, 0) != 0 ? 0 : 5;
  });
  cr_assert(r.end.exited && r.end.code == 0, "child exit %d signal %d", r.end.code, r.end.signal);
}

// Our own identity is a no-op that still verifies; root's own is refused
// (a "drop" to it would keep root and the bounding set).
Test(privilege, the_current_identity_is_a_verified_no_op_unless_it_is_root) {
  uid_t uid = getuid();
  gid_t gid = getgid();
  if (uid == 0 || gid == 0) {
    expect_refused(uid, gid, uid == 0 ? "uid 0" : "gid 0");
    return;
  }
  PrivilegeDrop same = prepared(uid, gid);
  cr_expect(!same.changes_identity());
  auto r = run_in_child_reporting([&](int) { return apply_privilege_drop_in_child(same); });
  cr_expect(r.end.exited && r.end.code == 0, "exit %d", r.end.code);
}

Test(privilege, a_non_root_process_is_refused_by_name) {
  CORRAL_SKIP_UNLESS_ROOT();
  PrivilegeDrop nobody = prepared(65534, 65534);
  auto r = run_in_child_reporting([&](int fd) {
    if (int err = apply_privilege_drop_in_child(nobody)) return 100 + err;
    // As nobody: another uid is refused, our own is a no-op.
    auto other = prepare_privilege_drop(200125, 200125);
    if (other.ok()) return 1;
    corral_test::report(fd, other.error().message());
    auto self = prepare_privilege_drop(65534, 65534);
    if (!self.ok() || self->changes_identity()) return 2;
    return apply_privilege_drop_in_child(*self) == 0 ? 0 : 3;
  });
  cr_assert(r.end.exited && r.end.code == 0, "child exit %d signal %d", r.end.code, r.end.signal);
  cr_expect(r.output.find("uid 200125") != std::string::npos, "message: %s", r.output.c_str());
  cr_expect(r.output.find("CAP_SETUID") != std::string::npos, "message: %s", r.output.c_str());
}

Test(privilege, apply_without_privilege_returns_the_errno) {
  CORRAL_SKIP_UNLESS_ROOT();
  // Prepared while root, applied in a child that has already become nobody:
  // the child's setgroups is refused and the errno comes back.
  PrivilegeDrop nobody = prepared(65534, 65534);
  PrivilegeDrop target = prepared(200126, 200126);
  auto r = run_in_child_reporting([&](int) {
    if (apply_privilege_drop_in_child(nobody) != 0) return 100;
    return apply_privilege_drop_in_child(target);
  });
  cr_expect_eq(r.end.code, EPERM, "exit %d", r.end.code);
}

Test(privilege, is_root_capable_matches_euid) {
  if (geteuid() != 0) cr_expect(!is_root_capable());
  auto r = run_in_child_reporting([&](int) {
    if (setresuid(65534, 65534, 65534) != 0) return 100;
    return is_root_capable() ? 1 : 0;
  });
  if (geteuid() == 0) cr_expect_eq(r.end.code, 0, "nobody looked root-capable (exit %d)", r.end.code);
}

Test(privilege, pool_hands_out_distinct_uids_and_says_when_exhausted) {
  UidPool pool(300000, 2);
  cr_assert(pool.status().ok());
  auto a = pool.acquire();
  auto b = pool.acquire();
  cr_assert(a.ok() && b.ok());
  cr_expect_neq(a->uid(), b->uid());
  cr_expect(a->uid() >= 300000 && a->uid() <= 300001 && a->gid() == a->uid());
  cr_expect_eq(pool.in_use(), 2u);
  auto c = pool.acquire();
  cr_assert(!c.ok());
  cr_expect(c.error().message().find("300000..300001") != std::string::npos, "%s", c.error().message().c_str());

  uid_t freed = a->uid();
  { UidPool::Lease gone = std::move(*a); }  // destroyed: returned to the pool
  cr_expect(!a->held());
  cr_expect_eq(pool.in_use(), 1u);
  auto again = pool.acquire();
  cr_assert(again.ok());
  cr_expect_eq(again->uid(), freed);
  b->release();
  cr_expect_eq(pool.in_use(), 1u);
}

Test(privilege, pool_default_range_and_reuse_at_scale) {
  UidPool pool;
  std::vector<UidPool::Lease> leases;
  std::set<uid_t> seen;
  for (int i = 0; i < 1000; ++i) {
    auto l = pool.acquire();
    cr_assert(l.ok());
    cr_assert(l->uid() >= 200000 && l->uid() <= 265535);
    seen.insert(l->uid());
    leases.push_back(std::move(*l));
  }
  cr_expect_eq(seen.size(), 1000u);
  leases.clear();
  cr_expect_eq(pool.in_use(), 0u);
  auto l = pool.acquire();
  cr_assert(l.ok());
  cr_expect(seen.count(l->uid()) == 1, "released uids are reused before new ones");
}

Test(privilege, pool_refuses_bad_ranges_by_name) {
  for (auto [first, count] : {std::pair<uid_t, std::uint32_t>{300000, 0}, {0, 10}, {4294967290u, 10}}) {
    UidPool pool(first, count);
    auto l = pool.acquire();
    cr_assert(!l.ok(), "range %u+%u accepted", first, count);
    std::string want = "first " + std::to_string(first) + " count " + std::to_string(count);
    cr_expect(l.error().message().find(want) != std::string::npos, "%s", l.error().message().c_str());
  }
  cr_expect(UidPool(4294967283u, 10).status().ok());  // ends at 4294967292
  cr_expect(UidPool(4290772992u, 100).status().ok());  // just past the band below
  cr_expect(UidPool(4286578588u, 100).status().ok());  // just before it
  // 4286578688..4290772991 are the kill helpers' own uids (uid_lock.hpp):
  // no run may get one, nor may a pool's range reach into them.
  for (auto [first, count] : {std::pair<uid_t, std::uint32_t>{4286578589u, 100}, {4290772991u, 10}, {4280000000u, 10000000}}) {
    auto reaper = UidPool(first, count).status();
    cr_assert(!reaper.ok(), "a range %u+%u holding a helper's uid was accepted", first, count);
    cr_expect(reaper.error().message().find("4286578688..4290772991") != std::string::npos, "%s",
              reaper.error().message().c_str());
  }
  for (uid_t u : {4286578688u, 4288000000u, 4290772991u})
    cr_expect(!corral::check_run_user(u).ok(), "--user %u, a helper's uid, was accepted", u);
  cr_expect(corral::check_run_user(4290772992u).ok());
}

Test(privilege, pinned_pool_shares_one_identity) {
  UidPool pool(300000, 1);
  pool.pin(1000, 1001);
  cr_expect(pool.pinned());
  auto a = pool.acquire();
  auto b = pool.acquire();
  cr_assert(a.ok() && b.ok());
  cr_expect(a->uid() == 1000 && a->gid() == 1001 && b->uid() == 1000);
  cr_expect_eq(pool.in_use(), 0u);
}

Test(privilege, refuses_ids_not_mapped_in_our_user_namespace) {
  // A fresh user namespace has every capability but no uid_map yet, so only
  // the mapping check can refuse here.
  auto r = run_in_child_reporting([&](int fd) {
    if (unshare(CLONE_NEWUSER) != 0) return 100;
    auto d = prepare_privilege_drop(200127, 200127);
    if (d.ok()) return 1;
    corral_test::report(fd, d.error().message());
    return 0;
  });
  if (r.end.code == 100) cr_skip_test("cannot create a user namespace here");
  cr_assert_eq(r.end.code, 0, "exit %d", r.end.code);
  cr_expect(r.output.find("uid 200127 is not mapped") != std::string::npos, "message: %s", r.output.c_str());
}

Test(privilege, verification_catches_a_drop_that_kept_capabilities) {
  CORRAL_SKIP_UNLESS_ROOT();
  // With SECBIT_NO_SETUID_FIXUP the kernel keeps our capabilities across the
  // uid change, so root could be regained: the verify step must say so.
  PrivilegeDrop target = prepared(200128, 200128);
  auto r = run_in_child_reporting([&](int) {
    if (prctl(PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP, 0, 0, 0) != 0) return 100;
    return apply_privilege_drop_in_child(target);
  });
  if (r.end.code == 100) cr_skip_test("cannot set securebits (needs CAP_SETPCAP)");
  cr_expect_eq(r.end.code, ENOTRECOVERABLE, "exit %d", r.end.code);
}

// A supervisor reads its ids, maps and capabilities once
// (read_privilege_facts) and judges every run's drop on them: the facts
// hold this process's maps as the kernel shows them, and a drop judged on
// facts refuses what a fresh read would (an unmapped uid, no CAP_SETUID).
Test(privilege, facts_read_once_hold_the_maps_and_judge_like_a_fresh_read) {
  PrivilegeFacts f = read_privilege_facts();
  cr_assert_eq(f.ids_errno, 0);
  cr_expect_eq(f.euid, geteuid());
  std::ifstream in("/proc/self/uid_map");
  std::vector<std::pair<std::uint64_t, std::uint64_t>> want;
  std::uint64_t inside = 0, outside = 0, count = 0;
  while (in >> inside >> outside >> count) want.emplace_back(inside, count);
  cr_assert(f.uid_map_read);
  cr_expect(f.uid_ranges == want, "%zu ranges parsed, %zu in the file", f.uid_ranges.size(), want.size());

  PrivilegeFacts narrow = f;
  narrow.uid_ranges = {{0, 1000}};
  narrow.uid_map_read = true;
  auto unmapped = prepare_privilege_drop(200128, 200128, narrow);
  cr_assert(!unmapped.ok());
  cr_expect(unmapped.error().message().find("uid 200128 is not mapped") != std::string::npos, "%s",
            unmapped.error().message().c_str());

  PrivilegeFacts no_caps = f;
  no_caps.uid_ranges = no_caps.gid_ranges = {{0, 4294967295}};
  no_caps.cap_setuid = false;
  auto refused = prepare_privilege_drop(200128, 200128, no_caps);
  cr_assert(!refused.ok());
  cr_expect_eq(refused.error().code(), EPERM);
  cr_expect(refused.error().message().find("CAP_SETUID") != std::string::npos, "%s", refused.error().message().c_str());

  // Root's ids stay refused whatever the facts say.
  cr_expect(!prepare_privilege_drop(0, 200128, no_caps).ok());
  if (is_root_capable()) {
    auto ok = prepare_privilege_drop(200128, 200128, f);
    cr_assert(ok.ok(), "%s", ok.ok() ? "" : ok.error().message().c_str());
    cr_expect(ok->changes_identity());
  }
}
