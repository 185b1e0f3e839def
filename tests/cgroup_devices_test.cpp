// The device rules of a run cgroup (CgroupSpec::devices): a process in the
// group opens exactly the devices listed, any other fails with EPERM from
// the kernel's device cgroup check (v1 devices.allow; v2 the BPF program).
#include <criterion/criterion.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "corral/cgroup.hpp"
#include "support.hpp"

using namespace corral;

namespace {

// 0, or 10 + the step that went wrong.
int open_result(const char* path) {
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd >= 0) {
    close(fd);
    return 0;
  }
  return errno;
}

}  // namespace

Test(cgroup_devices, a_member_opens_only_the_listed_devices) {
  CORRAL_SKIP_UNLESS_ROOT();
  CgroupProbe p = probe_cgroups();
  if (p.backend == CgroupVersion::none || !p.has("devices"))
    cr_skip_test("no devices cgroup here: %s", p.describe().c_str());
  struct stat null_st, zero_st;
  cr_assert_eq(stat("/dev/null", &null_st), 0);
  cr_assert_eq(stat("/dev/zero", &zero_st), 0);
  CgroupSpec spec;
  spec.devices = std::vector<DeviceRule>{{'c', major(null_st.st_rdev), static_cast<int>(minor(null_st.st_rdev))}};
  auto run = create_run_cgroup(p, spec, "devices");
  cr_assert(run.ok(), "%s", run.ok() ? "" : run.error().message().c_str());
  cr_assert(run->describe().find("1:3") != std::string::npos || run->describe().find("BPF device program") != std::string::npos,
            "%s", run->describe().c_str());
  if (run->version() == CgroupVersion::v1) {
    // The host side: the group's list is exactly the one rule.
    std::string dir;
    for (const auto& d : run->dirs())
      if (d.find("/devices/") != std::string::npos) dir = d;
    cr_assert(!dir.empty(), "no devices directory among the run's");
    std::string list = corral_test::read_file(dir + "/devices.list");
    cr_assert_eq(list, "c 1:3 rwm\n", "devices.list: %s", list.c_str());
  }
  int out[2];
  cr_assert_eq(pipe(out), 0);
  pid_t child = fork();
  if (child == 0) {
    close(out[0]);
    int joined = join_cgroup_in_child(*run);
    int r[3] = {joined, open_result("/dev/null"), open_result("/dev/zero")};
    (void)!write(out[1], r, sizeof r);
    _exit(0);
  }
  close(out[1]);
  int r[3] = {-1, -1, -1};
  cr_assert_eq(read(out[0], r, sizeof r), static_cast<ssize_t>(sizeof r));
  close(out[0]);
  waitpid(child, nullptr, 0);
  cr_assert_eq(r[0], 0, "join: %s", strerror(r[0]));
  cr_assert_eq(r[1], 0, "/dev/null (listed): %s", strerror(r[1]));
  cr_assert_eq(r[2], EPERM, "/dev/zero (not listed): %s, not EPERM", strerror(r[2]));
  // Outside the group nothing changed.
  cr_assert_eq(open_result("/dev/zero"), 0);
  cr_assert(run->remove().ok());
}
