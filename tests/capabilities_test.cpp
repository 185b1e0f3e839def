#include "corral/capabilities.hpp"

#include <grp.h>
#include <linux/capability.h>
#include <sys/capability.h>

#include <sstream>

#include "corral/privilege.hpp"
#include "support.hpp"

using namespace corral;
using corral_test::run_in_child_reporting;

namespace {

constexpr const char* kZero = "0000000000000000";
const char* const kCapFields[] = {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"};

CapabilityDrop prepared() {
  if (!has_effective_capability(CAP_SETPCAP)) cr_skip_test("needs CAP_SETPCAP (root)");
  auto drop = prepare_capability_drop();
  cr_assert(drop.ok(), "%s", drop.ok() ? "" : drop.error().message().c_str());
  return *drop;
}

// In a forked child: the capability lines of /proc/self/status plus
// NoNewPrivs, as "Key value\n" lines.
void report_cap_fields(int fd) {
  for (const char* key : kCapFields)
    corral_test::report(fd, std::string(key) + " " + corral_test::proc_status_field("self", key) + "\n");
  corral_test::report(fd, "NoNewPrivs " + corral_test::proc_status_field("self", "NoNewPrivs") + "\n");
}

std::string field(const std::string& report, const std::string& key) {
  std::istringstream in(report);
  std::string k, v;
  while (in >> k >> v)
    if (k == key) return v;
  return "<missing " + key + ">";
}

// Every capability set empty and no_new_privs on, per a child's report.
void expect_nothing_left(const corral_test::ChildReport& r) {
  cr_assert(r.end.exited && r.end.code == 0, "child exit %d signal %d; report:\n%s", r.end.code, r.end.signal,
            r.output.c_str());
  for (const char* key : kCapFields) {
    std::string v = field(r.output, key);
    cr_expect_eq(v, kZero, "%s is %s", key, v.c_str());
  }
  cr_expect_eq(field(r.output, "NoNewPrivs"), "1");
}

// A privileged call's errno (0 when it succeeded), as seen by the child.
int chown_errno(const std::string& path) { return chown(path.c_str(), 12345, 12345) == 0 ? 0 : errno; }

}  // namespace

Test(capabilities, prepare_learns_the_kernels_last_cap) {
  CapabilityDrop drop = prepared();
  int kernel = std::stoi(corral_test::read_file("/proc/sys/kernel/cap_last_cap"));
  cr_expect_eq(drop.last_cap(), kernel);
}

Test(capabilities, child_ends_with_every_set_empty_and_no_new_privs) {
  CapabilityDrop drop = prepared();
  auto r = run_in_child_reporting([&](int fd) {
    if (int err = apply_capability_drop_in_child(drop)) return 100 + err;
    report_cap_fields(fd);
    return 0;
  });
  expect_nothing_left(r);
}

Test(capabilities, privileged_calls_fail_afterwards) {
  CapabilityDrop drop = prepared();
  corral_test::TempDir dir;
  std::string file = dir / "f";
  corral_test::write_file(file, "x");
  // Control: before the drop the same call works (so the test can fail).
  auto before = run_in_child_reporting([&](int) { return chown_errno(file); });
  cr_assert_eq(before.end.code, 0, "chown before the drop failed: %s", strerror(before.end.code));
  auto after = run_in_child_reporting([&](int) {
    if (apply_capability_drop_in_child(drop) != 0) return 100;
    if (int err = chown_errno(file)) {
      if (err != EPERM) return 101;
    } else {
      return 102;
    }
    return setuid(12345) == 0 ? 103 : (errno == EPERM ? 0 : 104);
  });
  cr_expect(after.end.exited && after.end.code == 0, "child exit %d (102: chown worked, 103: setuid worked)",
            after.end.code);
}

Test(capabilities, root_gets_nothing_back_through_execve) {
  // uid 0 normally regains the bounding set on execve; with the bounding set
  // empty and no_new_privs, an exec'd program must see no capabilities.
  CapabilityDrop drop = prepared();
  auto r = run_in_child_reporting([&](int fd) {
    if (apply_capability_drop_in_child(drop) != 0) return 100;
    if (dup2(fd, STDOUT_FILENO) < 0) return 101;
    execl("/bin/cat", "cat", "/proc/self/status", static_cast<char*>(nullptr));
    return 102;
  });
  cr_assert(r.end.exited && r.end.code == 0, "exit %d", r.end.code);
  std::istringstream in(r.output);
  std::string line, flat;
  while (std::getline(in, line)) {  // "CapEff:\t0000..." -> "CapEff 0000..."
    auto colon = line.find(':');
    if (colon != std::string::npos) flat += line.substr(0, colon) + " " + line.substr(colon + 1) + "\n";
  }
  expect_nothing_left({r.end, flat});
}

Test(capabilities, composes_with_a_privilege_drop_in_order) {
  CORRAL_SKIP_UNLESS_ROOT();
  CapabilityDrop drop = prepared();
  auto ids = prepare_privilege_drop(200321, 200321);
  cr_assert(ids.ok(), "%s", ids.ok() ? "" : ids.error().message().c_str());
  auto r = run_in_child_reporting([&](int fd) {
    if (int err = drop_bounding_set_in_child(drop)) return 100 + err;
    if (int err = apply_privilege_drop_in_child(*ids)) return 150 + err;
    if (int err = clear_capabilities_in_child(drop)) return 200 + err;
    report_cap_fields(fd);
    return 0;
  });
  expect_nothing_left(r);
}

Test(capabilities, bounding_drop_without_setpcap_is_eperm) {
  CapabilityDrop drop = prepared();
  auto r = run_in_child_reporting([&](int) {
    // A plain fork, single-threaded: glibc's set*id are fine here.
    if (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0)
      return 100;
    return apply_capability_drop_in_child(drop);
  });
  cr_expect_eq(r.end.code, EPERM, "apply as uid 65534 returned %d", r.end.code);
}

Test(capabilities, prepare_refuses_without_setpcap) {
  // Root: take CAP_SETPCAP out of a child's effective set first. Others
  // lack it already.
  auto r = run_in_child_reporting([&](int fd) {
    if (has_effective_capability(CAP_SETPCAP)) {
      cap_t caps = cap_get_proc();
      cap_value_t setpcap = CAP_SETPCAP;
      if (caps == nullptr || cap_set_flag(caps, CAP_EFFECTIVE, 1, &setpcap, CAP_CLEAR) != 0 ||
          cap_set_proc(caps) != 0)
        return 100;
      cap_free(caps);
    }
    auto refused = prepare_capability_drop();
    if (refused.ok()) return 101;
    corral_test::report(fd, refused.error().message());
    return 0;
  });
  cr_assert_eq(r.end.code, 0, "exit %d", r.end.code);
  cr_expect(r.output.find("CAP_SETPCAP") != std::string::npos, "message: %s", r.output.c_str());
}
