// Owner records and the sweep of dead supervisors' leftovers
// (leftovers.hpp). Parent side only; blocking file I/O, at supervisor start.
#include "corral/leftovers.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "corral/workspace.hpp"

namespace corral {
namespace {

bool is_token(std::string_view name) {
  return name.size() == 12 && name.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::string read_small(int fd) {
  std::string text(4096, '\0');
  ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return text;
}

// The value of "key <value>\n" in a record.
std::string field(const std::string& text, std::string_view key) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ' ')
      return std::string(line.substr(key.size() + 1));
    pos = end + 1;
  }
  return {};
}

}  // namespace

Expected<OwnerRecord> OwnerRecord::create(std::string_view token, const std::string& workspace_base,
                                          const std::string& dir) {
  const std::string who = "owner record in '" + dir + "'";
  if (!is_token(token)) return Error::invalid(who + ": token must be 12 hex digits");
  if (workspace_base.find('\n') != std::string::npos) return Error::invalid(who + ": workspace base holds a newline");
  OwnerRecord rec;
  rec.dir_ = dir;
  rec.token_ = std::string(token);
  // Unnamed until locked and filled: a sweeper never sees a live owner's
  // record unlocked. The directory is made only when it is missing (the
  // first start on this boot): two mkdir calls every start otherwise.
  auto open_unnamed = [&] { rec.fd_.reset(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600)); };
  open_unnamed();
  if (!rec.fd_ && errno == ENOENT) {
    auto slash = dir.rfind('/');
    if (slash != std::string::npos && slash > 0) (void)::mkdir(dir.substr(0, slash).c_str(), 0755);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return Error::from_errno(errno, who + ": mkdir");
    open_unnamed();
  }
  if (!rec.fd_) return Error::from_errno(errno, who + ": open O_TMPFILE");
  if (::flock(rec.fd_.get(), LOCK_EX | LOCK_NB) != 0) return Error::from_errno(errno, who + ": flock");
  std::string text = "pid " + std::to_string(::getpid()) + "\nworkspace_base " + workspace_base + "\n";
  if (::pwrite(rec.fd_.get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    return Error::from_errno(errno, who + ": write");
  const std::string path = dir + "/" + rec.token_;
  if (::linkat(rec.fd_.get(), "", AT_FDCWD, path.c_str(), AT_EMPTY_PATH) != 0)
    return Error::from_errno(errno, who + ": link " + path);
  return rec;
}

OwnerRecord& OwnerRecord::operator=(OwnerRecord&& other) noexcept {
  if (this != &other) {
    this->~OwnerRecord();
    new (this) OwnerRecord(std::move(other));
  }
  return *this;
}

OwnerRecord::~OwnerRecord() {
  if (!fd_) return;
  // Ours (same inode): unlink before the lock goes, so no sweeper takes a
  // record whose owner ended normally for a dead one.
  struct stat mine {}, named {};
  const std::string path = dir_ + "/" + token_;
  if (::fstat(fd_.get(), &mine) == 0 && ::lstat(path.c_str(), &named) == 0 && mine.st_dev == named.st_dev &&
      mine.st_ino == named.st_ino)
    (void)::unlink(path.c_str());
  fd_.reset();
}

SweepReport sweep_dead_supervisors(std::string_view self, const std::string& dir) {
  SweepReport report;
  std::optional<CgroupProbe> cgroups;
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* e = ::readdir(d))
      if (is_token(e->d_name) && e->d_name != self) names.emplace_back(e->d_name);
    ::closedir(d);
  }
  for (const auto& token : names) {
    const std::string path = dir + "/" + token;
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) continue;  // swept by someone else meanwhile
    // Held: its owner lives (or another sweeper is at it). Never wait.
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
    // Still the file by that name? (A sweeper that finished unlinked it; a
    // new owner cannot reuse a token that is taken: linkat refuses.)
    struct stat mine {}, named {};
    if (::fstat(fd.get(), &mine) != 0 || ::lstat(path.c_str(), &named) != 0 || mine.st_ino != named.st_ino ||
        mine.st_dev != named.st_dev)
      continue;
    std::string text = read_small(fd.get());
    std::string base = field(text, "workspace_base");
    bool clean = true;
    if (!base.empty()) {
      auto removed = Workspace::remove_leftovers(base, token);
      if (removed) {
        report.workspaces += *removed;
      } else if (removed.error().code() != ENOENT) {
        report.problems.push_back(removed.error().message());
        clean = removed.error().code() == EPERM;  // not a base of ours: never will be
      }
    }
    if (!cgroups) cgroups = probe_cgroups();
    if (cgroups->backend != CgroupVersion::none) {
      const std::string prefix = "r-" + token + "-";
      auto swept = sweep_run_cgroups(*cgroups, CgroupSpec{},
                                     [&](std::string_view n) { return n.rfind(prefix, 0) == 0; });
      if (swept) report.cgroups += *swept;
      else report.problems.push_back(swept.error().message());
    }
    // Kept when a workspace could not go: the next start tries again.
    if (clean) {
      (void)::unlink(path.c_str());
      ++report.owners;
    }
  }
  return report;
}

}  // namespace corral
