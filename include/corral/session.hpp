// session: warm sandboxes. A session is a container-tier sandbox whose
// pid 1 stays alive between execs, with a persistent /workspace (the tmpfs
// of workspace_bytes), keyed by {scope, thread, agent} that the host
// supplies — never the workload.
//
// No daemon. acquire() starts a keeper process (posix_spawn of the corral
// CLI's internal `session keep`, so nothing of ours runs in a forked child
// of the caller; setsid, detached from the caller) that builds the sandbox the way a container run is built
// (prepare_run + spawn_container: namespaces, read-only root, the session's
// cgroup with its memory and pids ceilings, a uid of the host-wide pool
// held for the session's life) with an idle program under pid 1, then
// holds an flock on <dir>/<id>/lock for its whole life: "nobody holds the
// lock" is exactly "the keeper is gone", however it died (pid 1 has
// PDEATHSIG from it, so the sandbox goes with it). Everything else is host
// state under <dir>/<id>/ (`state`, `active`), so any process can find,
// use and dispose a session.
//
// exec is a Request with `session` set, submitted to any Supervisor like a
// run (same capture, masking, outcomes, streaming): the child joins the
// session's namespaces through a pidfd of its pid 1 (setns), a cgroup of
// its own below the session's (<session>/execs/<run>), and takes the same
// confinement as a container run's program (inside uid, no capabilities,
// no_new_privs, seccomp, rlimits). A deadline or cancel kills that cgroup
// — everything the exec started, setsid or not — and nothing else; its end
// does too (nothing an exec starts outlives it). An OOM at the exec's
// ceiling (min of its memory_bytes and the session's) is its killed_oom;
// one at the session's (its group also counts pid 1, the other execs and
// files left on its tmpfs mounts) is the killed_oom of the exec whose
// process the kernel's OOM killer took, and kills no other exec
// (session_join.hpp).
// The exec's process holds an flock on the exec's cgroup directory while
// the exec runs (its leader has PDEATHSIG): the keeper kills and removes an
// exec cgroup nobody claims, so no guardian process is needed for execs.
//
// Files (put/get/list/remove) work on the session's /workspace from the
// host through /proc/<pid1>/root, with the collection rules: openat2
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS|RESOLVE_NO_XDEV,
// no link ever followed.
//
// Root only (the keeper takes a uid of the host-wide pool; exec enters the
// session's namespaces); cgroup v1 for the per-exec cgroups (on v2 the
// session's own group holds pid 1, and a v2 group with processes cannot
// enable controllers for children: not done yet, refused with the reason).
// acquire() is safe in a multithreaded caller: it forks nothing itself.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "corral/fd.hpp"
#include "corral/process.hpp"
#include "corral/request.hpp"
#include "corral/session_join.hpp"
#include "corral/spawn.hpp"
#include "corral/status.hpp"

namespace corral {

inline constexpr std::string_view kSessionsDir = "/run/corral/sessions";

// Who a session belongs to, from the host's request context. scope and
// thread are required; agent may be empty. Each at most 256 bytes, no NUL
// and no newline.
struct SessionKey {
  std::string scope, thread, agent;
};

struct SessionSpec {
  // The container options: tier (must be container), rootfs, binds,
  // loopback, user, limits (memory_bytes, process_count, workspace_bytes
  // are the session's ceilings). argv is ignored (the idle program is
  // `sleep infinity`, from the sandbox's /usr). What matters for reuse is
  // fingerprint().
  Request base;
  double idle_seconds = 900;          // 0: no idle timeout
  double max_lifetime_seconds = 4 * 3600;  // 0: none
  std::size_t max_sessions = 64;      // live sessions on the host, checked at create
  std::string dir = std::string(kSessionsDir);
  // The program that becomes the keeper: the corral CLI (its internal verb
  // `session keep`). "": the process-wide default
  // (set_default_keeper_program: the corral CLI names itself), else beside
  // the library (<libdir>/../bin/corral), beside this program
  // (<dir>/../bin/corral), else `corral` on PATH.
  std::string keeper_program{};
};

// The keeper program of every acquire() in this process whose spec names
// none. The corral CLI sets "/proc/self/exe" at its start: it is its own
// keeper, found through the kernel's link to the running binary wherever it
// was copied and whatever PATH says (posix_spawn's child shares our memory
// until its execve, so the link is ours; a binary replaced or deleted since
// we started still runs). "" (the default): search as above.
void set_default_keeper_program(std::string program);

// What decides whether acquire() may hand an existing session out: tier,
// network, loopback, rootfs, binds, uid, and the ceilings.
std::string session_fingerprint(const SessionSpec& spec);
// "s-" + 16 hex of SHA-256 over the key: the same key always names the same id.
std::string session_id_for(const SessionKey& key);

// A live session as its host state describes it.
struct SessionInfo {
  std::string id;
  SessionKey key;
  std::string fingerprint;
  pid_t keeper = 0;
  pid_t pid1 = 0;                 // host pid of the sandbox's pid 1
  std::uint64_t pidns_inode = 0;  // /proc/<pid1>/ns/pid, against pid reuse
  uid_t outside_uid = 0;          // the host uid the sandbox's uid maps to
  gid_t outside_gid = 0;
  uid_t inside_uid = 0;
  std::vector<std::string> cgroup_dirs;  // the session's cgroup, one per hierarchy
  std::optional<std::uint64_t> memory_bytes, process_count;
  double created = 0;             // CLOCK_REALTIME seconds
  double last_used = 0;
  double idle_seconds = 0, max_lifetime_seconds = 0;
  std::string dir;                // <sessions dir>/<id>
  bool alive = false;             // the keeper holds the lock
};

// Get-or-create. Same key and a live session: that session (an Error if
// spec's fingerprint differs, naming what). Otherwise a new one, made
// before this returns (the keeper reports ready or the reason it failed).
// A dead session under the key is swept first. Refuses (EAGAIN) when
// spec.max_sessions live sessions exist.
Expected<SessionInfo> acquire_session(const SessionKey& key, const SessionSpec& spec);

// A session by id from host state; ENOENT when there is none, ESRCH when
// its keeper is gone (it is then swept).
Expected<SessionInfo> find_session(std::string_view id, const std::string& dir = std::string(kSessionsDir));
// Every session under dir, live or not (alive says).
std::vector<SessionInfo> list_sessions(const std::string& dir = std::string(kSessionsDir));

// Ends a session: SIGTERM to its keeper, which kills the sandbox, removes
// its cgroups and workspace, returns its uid and removes <dir>/<id>; waits
// (bounded, 5 s) until the lock is free. A session whose keeper is already
// gone is swept. ENOENT when there is no such session.
Status dispose_session(std::string_view id, const std::string& dir = std::string(kSessionsDir));
// Every session of `scope` (and `thread` when given), wherever it was
// created. Best effort: never fails; what could not be disposed goes to
// `problems` (when given) and is not counted. Returns how many were
// disposed; their ids go to `disposed` (when given), sorted.
int dispose_scope(std::string_view scope, std::optional<std::string_view> thread = std::nullopt,
                  const std::string& dir = std::string(kSessionsDir), std::vector<std::string>* problems = nullptr,
                  std::vector<std::string>* disposed = nullptr);
// Removes what sessions whose keeper died left (cgroups, state). Returns the count.
int sweep_sessions(const std::string& dir = std::string(kSessionsDir));

// exec: `request` with session = id and tier container, for Supervisor::submit /
// stream / run. inputs, outputs and a payload are refused for a session exec
// (use put/get); cwd is a path inside the sandbox (default /workspace).
Request session_exec_request(std::string_view id, Request request);

// ---- files, on the session's /workspace (paths relative to it)
struct SessionFileCaps {
  std::uint64_t file_bytes = 64ull << 20;   // get: per file
  std::uint64_t total_bytes = 256ull << 20; // get: per call
  std::size_t max_entries = 100000;         // list
};
// Writes bytes (mode & 0777) at `path`: parents made as needed, an existing
// regular file replaced; refused through a symlink (parent or leaf), onto a
// directory, or at the work dir itself. Files are the sandbox uid's.
Status session_put(std::string_view id, std::string_view path, std::string_view bytes, unsigned mode = 0644,
                   const std::string& dir = std::string(kSessionsDir));
// A regular file's bytes: the size is known (fstat) before the read and
// checked against the caps; a symlink, a device, a fifo or a directory is
// refused; a hard link to a file the sandbox's uid does not own is refused
// (a link to a host file is never read).
Expected<std::string> session_get(std::string_view id, std::string_view path, const SessionFileCaps& caps = {},
                                  const std::string& dir = std::string(kSessionsDir));
struct SessionEntry {
  std::string path;   // relative to /workspace
  char type = '?';    // 'f' file, 'd' directory, 'l' symlink, '?' other
  std::uint64_t bytes = 0;
};
// Entries whose path matches `glob` (glob.hpp: the dialect of --output and
// routes, "**" spanning directories), depth first, sorted; symlinks listed,
// never followed. "" lists everything.
Expected<std::vector<SessionEntry>> session_list(std::string_view id, std::string_view glob = "",
                                                 const SessionFileCaps& caps = {},
                                                 const std::string& dir = std::string(kSessionsDir));
// Removes `path`: a symlink is removed, not followed; a directory only with
// `recursive` (and then links inside it are removed, never followed); the
// work dir itself ("", ".", "/") is refused.
Status session_remove(std::string_view id, std::string_view path, bool recursive,
                      const std::string& dir = std::string(kSessionsDir));

// ---- internal: `corral session keep SPEC` (the keeper acquire starts), the
// ready pipe at fd 3. Returns an exit code; the keeper it forks never returns.
int session_keeper_main(std::string_view encoded_spec);

// What the run layer needs of a live session to run an exec in it
// (session_join.hpp): plain data, handed to prepare_run by the Supervisor
// (RunContext::session), so the run layer includes nothing of this layer.
SessionTarget session_target(const SessionInfo& info);

}  // namespace corral
