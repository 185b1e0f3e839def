// The mount table reader (src/mountinfo.hpp), on text: the kernel's line
// shape with and without optional fields, escaped paths, lines it cannot
// be, and the "at or below" test the namespace template's key uses.
#include <criterion/criterion.h>

#include <string>

#include "../src/mountinfo.hpp"
#include "support.hpp"

using namespace corral::detail;

Test(mountinfo, a_line_gives_each_field_with_its_paths_unescaped) {
  const std::string text =
      "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"
      "41 22 0:41 / /usr/local/a\\040b\\134c rw,relatime shared:7 master:2 - tmpfs my\\040tmp rw,size=1024k\n"
      "50 22 0:50 / /srv rw - nfs4 host:/export rw,vers=4.2\n";
  auto all = parse_mountinfo(text);
  cr_assert_eq(all.size(), 3u);
  cr_expect_str_eq(all[0].id.c_str(), "36");
  cr_expect_str_eq(all[0].dev.c_str(), "98:0");
  cr_expect_str_eq(all[0].root.c_str(), "/mnt1");
  cr_expect_str_eq(all[0].mount_point.c_str(), "/mnt/parent");
  cr_expect_str_eq(all[0].mount_options.c_str(), "rw,noatime");
  cr_expect_str_eq(all[0].fstype.c_str(), "ext3");
  cr_expect_str_eq(all[0].source.c_str(), "/dev/root");
  cr_assert_eq(all[0].super_options.size(), 2u);
  cr_expect_str_eq(all[0].super_options[1].c_str(), "errors=continue");
  // Two optional fields, a space and a backslash in the mount point.
  cr_expect_str_eq(all[1].mount_point.c_str(), "/usr/local/a b\\c");
  cr_expect_str_eq(all[1].fstype.c_str(), "tmpfs");
  cr_expect_str_eq(all[1].source.c_str(), "my tmp");
  // No optional field at all.
  cr_expect_str_eq(all[2].fstype.c_str(), "nfs4");
  cr_expect_str_eq(all[2].source.c_str(), "host:/export");
}

Test(mountinfo, lines_without_the_documented_shape_are_skipped) {
  const std::string text =
      "\n"
      "garbage\n"
      "36 35 98:0 / /a rw shared:1 ext3 /dev/root rw\n"   // no separator
      "37 35 98:0 / /b rw - ext3\n"                        // too few fields after it
      "38 35 98:0 / /c rw - ext3 /dev/root rw";            // no final newline: still a line
  auto all = parse_mountinfo(text);
  cr_assert_eq(all.size(), 1u);
  cr_expect_str_eq(all[0].mount_point.c_str(), "/c");
}

Test(mountinfo, a_type_filter_keeps_only_its_types_and_reads_them_whole) {
  // A mount point that spells " - cgroup2 " escaped must not pass for a
  // cgroup2 line, and a kept line is parsed as without the filter.
  const std::string text =
      "60 22 0:4 user:[4026532287] /run/corral/templates/users/1-2-1-2 rw - nsfs nsfs rw\n"
      "61 22 0:40 / /x\\040-\\040cgroup2\\040y rw,relatime - tmpfs tmpfs rw\n"
      "62 22 0:26 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
      "63 22 0:27 /sub /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
      "64 22 0:27 / /sys/fs/cgroup/pids rw - cgroup\n";  // too few fields after the separator
  auto kept = parse_mountinfo(text, [](std::string_view t) { return t == "cgroup" || t == "cgroup2"; });
  cr_assert_eq(kept.size(), 2u);
  cr_expect_str_eq(kept[0].mount_point.c_str(), "/sys/fs/cgroup/unified");
  cr_expect_str_eq(kept[0].fstype.c_str(), "cgroup2");
  cr_assert_eq(kept[0].super_options.size(), 2u);
  cr_expect_str_eq(kept[0].super_options[1].c_str(), "nsdelegate");
  cr_expect_str_eq(kept[1].root.c_str(), "/sub");
  cr_expect_str_eq(kept[1].fstype.c_str(), "cgroup");
  cr_expect_eq(parse_mountinfo(text).size(), 4u);
}

Test(mountinfo, at_or_below_is_by_whole_path_components) {
  cr_expect(mount_point_under("/usr", "/usr"));
  cr_expect(mount_point_under("/usr/local/x", "/usr"));
  cr_expect(!mount_point_under("/usr2", "/usr"));
  cr_expect(!mount_point_under("/us", "/usr"));
  cr_expect(!mount_point_under("/", "/usr"));
  cr_expect(mount_point_under("/etc/passwd", "/etc/passwd"));
  cr_expect(!mount_point_under("/etc/passwd-", "/etc/passwd"));
  cr_expect(mount_point_under("/", "/"));
  cr_expect(mount_point_under("/anything", "/"));
}

Test(mountinfo, this_process_has_a_table_with_its_root_in_it) {
  auto text = read_to_end("/proc/self/mountinfo");
  cr_assert(text.ok(), "%s", text.ok() ? "" : text.error().message().c_str());
  bool root = false;
  for (const auto& m : parse_mountinfo(*text)) root = root || m.mount_point == "/";
  cr_assert(root, "no mount at / in:\n%s", text->c_str());
  auto missing = read_to_end("/proc/self/no-such-file");
  cr_assert(!missing.ok());
  cr_assert(corral_test::contains(missing.error().message(), "/proc/self/no-such-file"), "%s",
            missing.error().message().c_str());
}
