// Held IPC namespaces (ipc_namespace.hpp).
#include "corral/ipc_namespace.hpp"

#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

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
  UniqueFd dir(::openat(mount.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return false;
  alignas(8) char buf[1024];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, dir.get(), buf, sizeof buf);
    if (n <= 0) return n == 0;
    // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
    for (long off = 0; off < n;) {
      unsigned short reclen;
      std::memcpy(&reclen, buf + off + 16, sizeof reclen);
      const char* name = buf + off + 19;
      if (std::strcmp(name, ".") != 0 && std::strcmp(name, "..") != 0) return false;
      off += reclen;
    }
  }
}

}  // namespace

UniqueFd hold_own_ipc_namespace() noexcept {
  return UniqueFd(::open("/proc/thread-self/ns/ipc", O_RDONLY | O_CLOEXEC));
}

bool enter_ipc_namespace_if_empty(int ns) noexcept {
  return ns >= 0 && ::setns(ns, CLONE_NEWIPC) == 0 && no_sysv_objects() && no_posix_queues();
}

}  // namespace corral
