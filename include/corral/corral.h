/* corral's C ABI: the apply halves of the mechanisms, for another
 * supervisor's preexec hook (fork + these calls + exec), and the prepare /
 * apply split of seccomp.
 *
 * Every function returns 0 or -errno. Unless a function says otherwise it
 * is async-signal-safe: raw system calls only, no allocation, no locks, no
 * errno changes — safe between fork() and exec() in a multi-threaded
 * process. Nothing here keeps a pointer to its arguments after returning.
 */
#ifndef CORRAL_H
#define CORRAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CORRAL_API __attribute__((visibility("default")))

struct corral_rlimit {
  int resource;   /* RLIMIT_* */
  uint64_t soft;  /* RLIM_INFINITY for none */
  uint64_t hard;
};

/* setrlimit for each entry, in order (prlimit64). Stops at the first error.
 * `limits` is borrowed. Async-signal-safe. */
CORRAL_API int corral_apply_rlimits(const struct corral_rlimit *limits, size_t count);

/* setgroups(0), setresgid, setresuid, then verify root cannot be regained
 * (setresuid(0,0,0) and setresgid(0,0,0) must fail; -ENOTRECOVERABLE if
 * either works: _exit then). uid 0 or gid 0 (or -1) is -EINVAL: a drop to
 * root is none. Needs CAP_SETUID/CAP_SETGID unless uid/gid are already the
 * identity. Async-signal-safe. */
CORRAL_API int corral_drop_privileges(uid_t uid, gid_t gid);

/* Clear ambient and (when CAP_SETPCAP allows) bounding capabilities, clear
 * permitted/effective/inheritable, set no_new_privs. Without CAP_SETPCAP
 * the bounding set stays, but no_new_privs keeps exec from gaining
 * anything through it. Async-signal-safe. */
CORRAL_API int corral_drop_capabilities(void);

/* Landlock: from now on this process (and what it execs) may write only
 * beneath `paths` (read and execute stay allowed everywhere; from Landlock
 * ABI 5 a device's ioctls too), no_new_privs set: the ruleset the library's
 * landlock module builds for that write set. -EOPNOTSUPP when the kernel
 * has no Landlock. `paths` and the strings
 * are borrowed. Async-signal-safe (open, landlock_* system calls). */
CORRAL_API int corral_confine_writes(const char *const *paths, size_t count);

/* The Landlock ABI version this kernel offers, 0 if none. Async-signal-safe. */
CORRAL_API int corral_landlock_abi(void);

/* PR_SET_CHILD_SUBREAPER: orphans of our descendants become our children. */
CORRAL_API int corral_become_subreaper(void);

/* seccomp, prepared in the parent (NOT async-signal-safe: libseccomp
 * allocates), applied in the child. Profiles: "default" (deny-list: kexec,
 * modules, bpf, perf, ptrace, mount family, namespaces, io_uring, ...
 * answer EPERM) and "no-network" (socket() for anything but AF_UNIX answers
 * EACCES); join several with ',' ("default,no-network"). *out is owned by
 * the caller: free it with corral_seccomp_free. */
struct corral_seccomp;
CORRAL_API int corral_seccomp_prepare(const char *profile, struct corral_seccomp **out);
/* no_new_privs + seccomp(SECCOMP_SET_MODE_FILTER). Async-signal-safe. */
CORRAL_API int corral_seccomp_apply(const struct corral_seccomp *prepared);
CORRAL_API void corral_seccomp_free(struct corral_seccomp *prepared);

/* "0.1.0"; static storage. */
CORRAL_API const char *corral_version(void);

#ifdef __cplusplus
}
#endif

#endif /* CORRAL_H */
