// Internal: the kernel's mount table as /proc/PID/mountinfo prints it
// (proc(5), Documentation/filesystems/proc.rst), parsed once for the two
// readers that need it: the cgroup probe (where each hierarchy is mounted)
// and the container tier's mount tree (which host mounts lie under what a
// namespace template binds); and one mount asked by its path (statmount),
// for a reader that knows where to look. Parent side.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "corral/status.hpp"
#include "text.hpp"  // read_to_end, for the table's readers

namespace corral::detail {

// One line. Paths are unescaped (the kernel writes space, tab, newline and
// backslash as \ooo); the rest is as printed.
struct MountInfoEntry {
  std::string id;             // the mount's id: unique among mounts alive now, reused after an unmount
  std::string dev;            // "major:minor" of its filesystem (st_dev of what it shows)
  std::string root;           // the directory of that filesystem mounted here
  std::string mount_point;    // where, relative to the reader's root
  std::string mount_options;  // per mount: "rw,nosuid,relatime"
  std::string fstype, source;
  std::vector<std::string> super_options;  // per filesystem
};

// Lines that do not have the documented shape are skipped. With
// `keep_fstype`, so are lines of any other filesystem type, before they are
// split: a reader that wants the cgroup hierarchies of a host whose table is
// mostly namespace templates does not build an entry per template.
std::vector<MountInfoEntry> parse_mountinfo(std::string_view text, bool (*keep_fstype)(std::string_view) = nullptr);

// The mount whose root is `path` (its last component not followed), asked
// of the kernel alone: statx(2) for its id and whether `path` is a mount's
// root, statmount(2) (Linux 6.8; its filesystem options 6.11) for the rest.
// Two system calls, whatever the size of the table: /proc/self/mountinfo
// prints every mount (~2.6 us a line here, 2.4 ms on a host of 1,000).
// Filled: id, dev, root, mount_point, fstype, super_options (without
// rw/ro); not mount_options or source.
// nullopt: nothing is mounted on `path` (or it does not exist). An error:
// the kernel cannot tell (before 6.8: ENOSYS, EINVAL), or not all of it
// (before 6.11, no filesystem options: EOPNOTSUPP).
Expected<std::optional<MountInfoEntry>> mount_rooted_at(const std::string& path);

// Of the mounts `ids` of the table `table` (the whole of a
// /proc/PID/mountinfo), which no path reaches: a mount was made on its root
// (a subtree bound over a hierarchy, a tmpfs over its mount point), or on a
// directory above its mount point in the filesystem under it (a tmpfs over
// /sys/fs/cgroup made after the hierarchies below it), or the same holds of
// a mount it lies on. Decided by the parent ids, not the order of the
// lines: a mount moved (MS_MOVE) or tucked beneath another keeps its id.
std::vector<bool> mounts_out_of_reach(std::string_view table, const std::vector<std::string>& ids);

// Whether `mount_point` is `dir` or lies below it (both absolute, no
// trailing slash but for "/" itself).
bool mount_point_under(std::string_view mount_point, std::string_view dir) noexcept;

}  // namespace corral::detail
