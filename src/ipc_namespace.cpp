// Held IPC namespaces (ipc_namespace.hpp).
#include "corral/ipc_namespace.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace corral {
namespace {

bool no_sysv_objects() noexcept {
  struct shm_info shm {};
  if (::shmctl(0, SHM_INFO, reinterpret_cast<struct shmid_ds*>(&shm)) < 0 || shm.used_ids != 0) return false;
  struct msginfo msg {};
  if (::msgctl(0, MSG_INFO, reinterpret_cast<struct msqid_ds*>(&msg)) < 0 || msg.msgpool != 0) return false;
  struct seminfo sem {};
  union semun {  // semctl(2): the caller declares it
    int val;
    struct semid_ds* buf;
    unsigned short* array;
    struct seminfo* info;
  } arg;
  arg.info = &sem;
  return ::semctl(0, 0, SEM_INFO, arg) >= 0 && sem.semusz == 0;
}

// A mount of the calling thread's namespace's mqueue filesystem: its fs
// context takes the caller's IPC namespace.
UniqueFd mount_own_mqueue() noexcept {
  UniqueFd fs(static_cast<int>(::syscall(SYS_fsopen, "mqueue", FSOPEN_CLOEXEC)));
  if (!fs || ::syscall(SYS_fsconfig, fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) return UniqueFd();
  return UniqueFd(static_cast<int>(::syscall(SYS_fsmount, fs.get(), FSMOUNT_CLOEXEC, 0)));
}

// Lists the mount's root afresh (a new open, so no cursor of an earlier
// listing is reused): any entry is a queue.
bool no_posix_queues(int mqueue) noexcept {
  const int fd = ::openat(mqueue, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* dir = fd >= 0 ? ::fdopendir(fd) : nullptr;
  if (dir == nullptr) {
    if (fd >= 0) ::close(fd);
    return false;
  }
  bool empty = true;
  errno = 0;
  while (dirent* e = ::readdir(dir))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) empty = false;
  if (errno != 0) empty = false;  // a listing cut short says nothing
  ::closedir(dir);
  return empty;
}

}  // namespace

HeldIpcNamespace hold_own_ipc_namespace() noexcept {
  HeldIpcNamespace held;
  held.ns.reset(::open("/proc/thread-self/ns/ipc", O_RDONLY | O_CLOEXEC));
  if (held.ns) held.mqueue = mount_own_mqueue();
  return held;
}

bool enter_ipc_namespace_if_empty(HeldIpcNamespace& held) noexcept {
  if (!held.ns || ::setns(held.ns.get(), CLONE_NEWIPC) != 0 || !no_sysv_objects()) return false;
  if (!held.mqueue) held.mqueue = mount_own_mqueue();
  return held.mqueue && no_posix_queues(held.mqueue.get());
}

}  // namespace corral
