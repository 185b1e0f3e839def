// Workspace removal of a tree as deep as a program cares to make it: the
// workspace is removed after every run, so its cost is the supervisor's,
// chosen by the program. The rest of the workspace's tests are
// workspace_test.cpp.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "corral/workspace.hpp"
#include "support.hpp"

using namespace corral;

namespace {

long peak_rss_kib() {
  struct rusage ru {};
  cr_assert_eq(getrusage(RUSAGE_SELF, &ru), 0);
  return ru.ru_maxrss;
}

bool exists_nofollow(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// `depth` nested directories "a" below dir (through fds: the path is far
// past PATH_MAX); then, at the bottom, a file and a symlink to `outside`.
void nest(const std::string& dir, int depth, const std::string& outside) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  cr_assert(fd >= 0, "open %s: %s", dir.c_str(), std::strerror(errno));
  for (int i = 0; i < depth; ++i) {
    cr_assert_eq(::mkdirat(fd, "a", 0755), 0, "mkdir at level %d: %s", i, std::strerror(errno));
    int sub = ::openat(fd, "a", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    cr_assert(sub >= 0, "open level %d: %s", i, std::strerror(errno));
    ::close(fd);
    fd = sub;
  }
  int file = ::openat(fd, "leaf.txt", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  cr_assert(file >= 0, "create leaf.txt: %s", std::strerror(errno));
  ::close(file);
  cr_assert_eq(::symlinkat(outside.c_str(), fd, "out"), 0, "symlink: %s", std::strerror(errno));
  ::close(fd);
}

}  // namespace

// Red team: removal kept the whole relative path of every level on its
// stack, O(depth^2): 40,000 levels cost 1.6 GB and 11 s. 30,000 levels must
// now go in well under 100 MB (a name per level), completely, and without
// following the symlink at the bottom.
Test(workspace_depth, a_30000_deep_tree_is_removed_in_bounded_memory) {
  constexpr int kDepth = 30000;
  constexpr long kBoundKib = 100 * 1024;
  corral_test::TempDir base, outside;
  corral_test::write_file(outside / "keep", "host file");
  WorkspaceOptions options;
  options.base_dir = base.path();
  auto ws = Workspace::create(options);
  cr_assert(ws.ok(), "%s", ws.ok() ? "" : ws.error().message().c_str());
  const std::string path = ws->path();
  nest(path + "/tmp", kDepth, outside.path());

  const long before = peak_rss_kib();
  const auto start = std::chrono::steady_clock::now();
  Status removed = ws->remove();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const long grew = peak_rss_kib() - before;
  cr_assert(removed.ok(), "%s", removed.ok() ? "" : removed.error().message().c_str());
  cr_assert(grew < kBoundKib, "removing %d levels raised the peak RSS by %ld KiB (bound %ld) in %.1f s", kDepth, grew,
            kBoundKib, secs);
  cr_assert(!exists_nofollow(path), "the workspace %s is still there", path.c_str());
  cr_assert(exists_nofollow(outside / "keep"), "removal followed the symlink out of the workspace");
  cr_log_info("removed %d levels: peak RSS +%ld KiB, %.2f s", kDepth, grew, secs);
}
