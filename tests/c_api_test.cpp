// The C ABI as another supervisor would use it: fork, corral_* calls, exec
// (or observe). Also: only corral_* leaves libcorral.so, and the Python
// preexec example works.
#include "corral/corral.h"

#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <termios.h>

#include <cstdio>

#include "corral/landlock.hpp"
#include "support.hpp"

using namespace corral_test;

namespace {

std::string command_output(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

}  // namespace

Test(c_api, apply_rlimits_shows_in_proc_limits) {
  TempDir dir;
  std::string out = dir / "limits";
  auto end = run_in_child([&] {
    corral_rlimit l[] = {{RLIMIT_NOFILE, 64, 64}, {RLIMIT_CORE, 0, 0}};
    if (corral_apply_rlimits(l, 2) != 0) return 1;
    write_file(out, read_file("/proc/self/limits"));
    return 0;
  });
  cr_assert(end.exited && end.code == 0);
  std::string limits = read_file(out);
  cr_assert(limits.find("Max open files            64                   64") != std::string::npos, "%s", limits.c_str());
  auto bad = run_in_child([] {
    corral_rlimit l[] = {{RLIMIT_NOFILE, 100, 10}};
    return corral_apply_rlimits(l, 1) == -EINVAL ? 0 : 1;
  });
  cr_assert(bad.exited && bad.code == 0, "soft > hard must be -EINVAL");
}

Test(c_api, confine_writes_refuses_a_write_outside) {
  if (corral_landlock_abi() < 1) cr_skip_test("kernel has no Landlock");
  TempDir inside, outside;
  auto end = run_in_child([&] {
    const char* paths[] = {inside.path().c_str()};
    if (corral_confine_writes(paths, 1) != 0) return 10;
    FILE* ok = fopen((inside / "a").c_str(), "w");
    if (!ok) return 11;
    fclose(ok);
    FILE* no = fopen((outside / "b").c_str(), "w");
    if (no) return 12;
    return errno == EACCES ? 0 : 13;
  });
  cr_assert(end.exited, "child died");
  cr_assert_eq(end.code, 0, "child code %d", end.code);
  const char* missing[] = {"/nonexistent-corral-path"};
  auto bad = run_in_child([&] { return corral_confine_writes(missing, 1) == -ENOENT ? 0 : 1; });
  cr_assert(bad.exited && bad.code == 0, "a missing path must be -ENOENT");
}

// The C ABI builds the landlock module's ruleset, not one of its own: on
// ABI >= 5 that handles LANDLOCK_ACCESS_FS_IOCTL_DEV (no device ioctl
// outside the write set: what closes TIOCSTI-style injection through a
// terminal). A second rights table in c_api.cpp stopped at ABI 3, so an
// ioctl on /dev/null answered ENOTTY (the device's own answer) there.
Test(c_api, confine_writes_is_the_landlock_modules_ruleset) {
  const int abi = corral_landlock_abi();
  if (abi < 5) cr_skip_test("Landlock ABI %d has no device ioctl right (needs 5)", abi);
  cr_assert_eq(abi, corral::landlock_abi());
  TempDir inside;
  auto end = run_in_child([&] {
    const char* paths[] = {inside.path().c_str()};
    if (corral_confine_writes(paths, 1) != 0) return 10;
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 11;
    struct termios t;
    if (ioctl(fd, TCGETS, &t) == 0) return 12;
    return errno == EACCES ? 0 : errno == ENOTTY ? 13 : 14;
  });
  cr_assert(end.exited, "child died");
  cr_assert_eq(end.code, 0, "child code %d (13: the ioctl reached the device: IOCTL_DEV not handled)", end.code);
  // A single file as a write path gets the file rights only, as prepare() gives it.
  std::string file = inside / "f";
  write_file(file, "x");
  auto one = run_in_child([&] {
    const char* paths[] = {file.c_str()};
    if (corral_confine_writes(paths, 1) != 0) return 10;
    FILE* f = fopen(file.c_str(), "w");
    if (!f) return 11;
    fclose(f);
    return 0;
  });
  cr_assert(one.exited && one.code == 0, "child code %d", one.code);
}

Test(c_api, capabilities_and_seccomp_from_c) {
  CORRAL_SKIP_UNLESS_ROOT();
  TempDir dir;
  std::string out = dir / "status";
  corral_seccomp* bogus = nullptr;
  cr_assert_lt(corral_seccomp_prepare("bogus", &bogus), 0, "an unknown profile must be refused");
  cr_assert_null(bogus);
  corral_seccomp* again = nullptr;
  cr_assert_eq(corral_seccomp_prepare("default,no-network", &again), 0);
  auto end = run_in_child([&] {
    if (corral_drop_capabilities() != 0) return 1;
    if (corral_seccomp_apply(again) != 0) return 2;
    write_file(out, read_file("/proc/self/status"));
    return 0;
  });
  corral_seccomp_free(again);
  cr_assert(end.exited && end.code == 0, "child code %d", end.code);
  std::string status = read_file(out);
  cr_assert(status.find("CapEff:\t0000000000000000") != std::string::npos, "%s", status.c_str());
  cr_assert(status.find("CapBnd:\t0000000000000000") != std::string::npos);
  cr_assert(status.find("NoNewPrivs:\t1") != std::string::npos);
  cr_assert(status.find("Seccomp:\t2") != std::string::npos);
}

Test(c_api, drop_privileges_changes_uid) {
  CORRAL_SKIP_UNLESS_ROOT();
  auto end = run_in_child([] {
    if (corral_drop_privileges(200321, 200321) != 0) return 1;
    if (getuid() != 200321 || getgid() != 200321) return 2;
    return setuid(0) == 0 ? 3 : 0;
  });
  cr_assert(end.exited && end.code == 0, "child code %d", end.code);
}

// A drop "to" uid 0 or gid 0 is none: -EINVAL, and nothing changed (the
// child is still root: no half drop that kept gid 0).
Test(c_api, drop_privileges_refuses_uid_0_and_gid_0) {
  CORRAL_SKIP_UNLESS_ROOT();
  auto end = run_in_child([] {
    if (corral_drop_privileges(0, 65534) != -EINVAL) return 1;
    if (corral_drop_privileges(65534, 0) != -EINVAL) return 2;
    if (corral_drop_privileges(0, 0) != -EINVAL) return 3;
    if (getuid() != 0 || getgid() != 0) return 4;
    return 0;
  });
  cr_assert(end.exited && end.code == 0, "child code %d", end.code);
}

// It returns 0 only once root cannot be regained: with capabilities kept
// across the uid change (SECBIT_NO_SETUID_FIXUP), setresuid(0,0,0) would
// work afterwards, so the drop reports -ENOTRECOVERABLE instead.
Test(c_api, drop_privileges_verifies_root_cannot_be_regained) {
  CORRAL_SKIP_UNLESS_ROOT();
  auto end = run_in_child([] {
    if (prctl(PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP, 0, 0, 0) != 0) return 100;
    return corral_drop_privileges(200322, 200322) == -ENOTRECOVERABLE ? 0 : 1;
  });
  if (end.code == 100) cr_skip_test("cannot set securebits (needs CAP_SETPCAP)");
  cr_assert(end.exited && end.code == 0, "child code %d", end.code);
}

Test(c_api, shared_object_exports_only_corral_symbols) {
  std::string lib = build_dir() + "/lib/libcorral.so";
  // The version node (CORRAL_0) is listed as an absolute symbol: it names
  // the version, it is not an export.
  std::string syms = command_output("nm -D --defined-only " + lib + " | awk '$2 != \"A\" {print $3}'");
  cr_assert(!syms.empty(), "nm printed nothing for %s", lib.c_str());
  std::istringstream in(syms);
  std::string sym;
  int count = 0;
  while (std::getline(in, sym)) {
    if (sym.empty()) continue;
    ++count;
    cr_assert(sym.rfind("corral_", 0) == 0, "exported symbol %s is not corral_*", sym.c_str());
  }
  cr_assert_geq(count, 10);
}

Test(c_api, python_preexec_example_works) {
  std::string preload;
#if defined(__SANITIZE_ADDRESS__)
  // A sanitized libcorral.so needs the ASan runtime loaded first in Python.
  preload = "LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 ";
#endif
  std::string cmd = preload + "CORRAL_LIB=" + build_dir() + "/lib/libcorral.so python3 examples/python_preexec.py 2>&1";
  std::string out = command_output(cmd);
  cr_assert(out.find("Max open files            64                   64") != std::string::npos, "%s", out.c_str());
  cr_assert(out.find("write inside: ok") != std::string::npos, "%s", out.c_str());
  cr_assert(out.find("write outside: refused") != std::string::npos, "%s", out.c_str());
}
