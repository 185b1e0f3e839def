// Parent side only, except kill_as_uid_in_child (the helper's body).
#include "corral/uid_lock.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "corral/syscalls.hpp"

namespace corral {

Expected<UidLockFile> UidLockFile::open(const std::string& path) {
  const std::string who = "uid lock file '" + path + "'";
  UidLockFile f;
  f.path_ = path;
  auto open_file = [&] { f.fd_.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)); };
  open_file();
  // Its directory is made only when the open says it is missing (the first
  // start on this boot), not with a mkdir answering EEXIST every start.
  auto slash = path.rfind('/');
  if (!f.fd_ && errno == ENOENT && slash != std::string::npos && slash > 0) {
    // /run/corral (root-owned, 0755): the templates live there too.
    std::string dir = path.substr(0, slash);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Error::from_errno(errno, who + ": mkdir " + dir);
    open_file();
  }
  if (!f.fd_) return Error::from_errno(errno, who + ": open");
  return f;
}

namespace {

struct flock byte_lock(short type, uid_t uid) {
  struct flock fl;
  std::memset(&fl, 0, sizeof fl);  // l_pid must be 0 for OFD locks
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(uid);
  fl.l_len = 1;
  return fl;
}

}  // namespace

Expected<bool> UidLockFile::try_lock(uid_t uid) noexcept {
  struct flock fl = byte_lock(F_WRLCK, uid);
  if (::fcntl(fd_.get(), F_OFD_SETLK, &fl) == 0) return true;
  if (errno == EAGAIN || errno == EACCES) return false;
  return Error::from_errno(errno, "uid lock: F_OFD_SETLK on uid " + std::to_string(uid) + " in " + path_);
}

void UidLockFile::unlock(uid_t uid) noexcept {
  struct flock fl = byte_lock(F_UNLCK, uid);
  (void)::fcntl(fd_.get(), F_OFD_SETLK, &fl);
}

Expected<bool> UidLockFile::held_elsewhere(uid_t uid) const noexcept {
  struct flock fl = byte_lock(F_WRLCK, uid);
  if (::fcntl(fd_.get(), F_OFD_GETLK, &fl) != 0)
    return Error::from_errno(errno, "uid lock: F_OFD_GETLK on uid " + std::to_string(uid) + " in " + path_);
  return fl.l_type != F_UNLCK;
}

bool UidLockFile::left_clean(uid_t uid) const noexcept { return byte(uid) == kUidClean; }

bool UidLockFile::mark(uid_t uid, bool clean) noexcept { return write_byte(uid, clean ? kUidClean : kUidDirty); }

char UidLockFile::byte(uid_t uid) const noexcept {
  char b = 0;
  return ::pread(fd_.get(), &b, 1, static_cast<off_t>(uid)) == 1 ? b : 0;
}

bool UidLockFile::write_byte(uid_t uid, char byte) noexcept {
  return ::pwrite(fd_.get(), &byte, 1, static_cast<off_t>(uid)) == 1;
}

long UidLockFile::read_bytes(uid_t first, char* out, std::size_t n) const noexcept {
  std::size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd_.get(), out + got, n - got, static_cast<off_t>(first) + static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;  // the file ends here
    got += static_cast<std::size_t>(r);
  }
  return static_cast<long>(got);
}

namespace {

struct KillArgs {
  long uid;
  int sig;
  int setuid_error;  // written by the helper (shared memory: CLONE_VM)
  int kill_error;
};

// The helper, between clone and its exit: raw syscalls only (it borrows the
// parent's memory). Every signal stays blocked (clone_child blocks them
// around a CLONE_VM clone), so nothing of the parent's runs on its stack.
int kill_as_uid_in_child(void* p) noexcept {
  auto* a = static_cast<KillArgs*>(p);
  a->kill_error = kill_uid_in_child(a->uid, a->sig, &a->setuid_error);
  return a->setuid_error ? 1 : 0;
}

}  // namespace

int become_reaper_of_uid_in_child(long uid) noexcept {
  const long reaper = static_cast<long>(reaper_uid_of_pid(sys::call(SYS_getpid)));
  return sys::error_of(sys::call(SYS_setresuid, reaper, uid, reaper));
}

int kill_uid_in_child(long uid, int sig, int* setuid_error) noexcept {
  *setuid_error = become_reaper_of_uid_in_child(uid);
  if (*setuid_error) return 0;
  return sys::error_of(sys::call(SYS_kill, -1, sig));
}

Status signal_uid(uid_t uid, int sig, const ChildStack& stack) {
  const std::string who = "kill every process of uid " + std::to_string(uid);
  if (uid == 0 || uid == static_cast<uid_t>(-1) || is_reaper_uid(uid))
    return Error::invalid(who + ": refused (uid 0, -1 or one of the kill helpers' own)");
  CloneSpec spec;
  spec.share_memory = true;
  spec.stack = &stack;
  // A helper of another pid namespace may share our helper's real uid
  // (uid_lock.hpp) and kill it before it sent anything: then again, and an
  // error if it never got through.
  for (int attempt = 1;; ++attempt) {
    KillArgs args{static_cast<long>(uid), sig, 0, 0};
    auto helper = clone_child(spec, kill_as_uid_in_child, &args);
    if (!helper) return std::move(helper).error().context(who);
    auto status = wait_exit(*helper, true);
    if (!status) return std::move(status).error().context(who);
    if (*status && !(*status)->exited) {
      if (attempt < kReaperHelperAttempts) continue;
      return Error(EINTR, who + ": the helper was killed " + std::to_string(attempt) + " times before it could");
    }
    if (args.setuid_error) return Error::from_errno(args.setuid_error, who + ": setresuid in the helper");
    if (args.kill_error && args.kill_error != ESRCH) return Error::from_errno(args.kill_error, who + ": kill(-1)");
    return {};
  }
}

}  // namespace corral
