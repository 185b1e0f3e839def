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

// mqueue's fs context takes the caller's IPC namespace, so this mount (made
// and dropped here, in no mount table: ~14 µs) shows that namespace's queues.
bool no_posix_queues() noexcept {
  UniqueFd fs(static_cast<int>(::syscall(SYS_fsopen, "mqueue", FSOPEN_CLOEXEC)));
  if (!fs || ::syscall(SYS_fsconfig, fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) return false;
  UniqueFd mount(static_cast<int>(::syscall(SYS_fsmount, fs.get(), FSMOUNT_CLOEXEC, 0)));
  if (!mount) return false;
  const int fd = ::openat(mount.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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

UniqueFd hold_own_ipc_namespace() noexcept {
  return UniqueFd(::open("/proc/thread-self/ns/ipc", O_RDONLY | O_CLOEXEC));
}

bool enter_ipc_namespace_if_empty(int ns) noexcept {
  return ns >= 0 && ::setns(ns, CLONE_NEWIPC) == 0 && no_sysv_objects() && no_posix_queues();
}

}  // namespace corral
