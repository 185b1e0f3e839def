// Internal to the session sources: the host state of a session under
// <dir>/<id>/ and its locks. Parent side only; not installed.
//
//   <dir>/.lock       flock'ed (LOCK_EX) around every create, sweep and the
//                     keeper's final removal: a session directory is never
//                     removed while another is being made under the same id.
//   <dir>/<id>/lock   flock'ed (LOCK_EX) by the keeper for its whole life.
//   <dir>/<id>/state  "key value" lines, written once by the keeper (rename).
//   <dir>/<id>/active its mtime is the last use (an exec's start and end).
#pragma once

#include <string>
#include <string_view>

#include "corral/fd.hpp"
#include "corral/session.hpp"
#include "corral/status.hpp"

namespace corral::session_state {

double now_realtime();

// <dir>/.lock, taken blocking. Errors name the path.
Expected<UniqueFd> lock_sessions_dir(const std::string& dir);
// Whether someone holds <session_dir>/lock (the keeper lives).
bool keeper_alive(const std::string& session_dir);

std::string format(const SessionInfo& info);
// Fills what the text says; dir/id/alive are the caller's.
SessionInfo parse(const std::string& text);
Expected<SessionInfo> read(const std::string& dir, std::string_view id);
// Atomically (tmp + rename) writes <session_dir>/state.
Status write(const SessionInfo& info);
// utimensat(now) on <session_dir>/active.
void touch_active(const std::string& session_dir);
double active_mtime(const std::string& session_dir);

// What a session whose keeper is gone left: the exec cgroups
// (session_cgroup.hpp) and the session's own (processes in them killed
// first), then the files and the directory. Call with <dir>/.lock held. Errors are collected.
void remove_leftovers(const SessionInfo& info, std::vector<std::string>& problems);
// Removes <session_dir>/{state,active,lock} and the directory.
void remove_files(const std::string& session_dir);

bool valid_id(std::string_view id);

// Starting the keeper (session_spawn.cpp): posix_spawn of the keeper program
// (SessionSpec::keeper_program, else the corral CLI beside the library or
// this program, else on PATH) as `corral session keep SPEC`, `ready_fd` as
// its fd 3, stdio /dev/null, a session of its own, default signals. It
// forks the keeper and exits at once: reap the pid returned.
Expected<pid_t> spawn_keeper(const SessionKey& key, const SessionSpec& spec, const std::string& id, int ready_fd);
std::string keeper_program(const SessionSpec& spec);
// What `session keep` gets on its argv: the key, the id and the spec's
// container options, every value hex-encoded.
struct KeeperSpec {
  std::string id;
  SessionKey key;
  SessionSpec spec;
};
std::string encode_keeper_spec(const SessionKey& key, const SessionSpec& spec, const std::string& id);
Expected<KeeperSpec> decode_keeper_spec(std::string_view text);
// `corral session keep SPEC`, with the ready pipe at fd 3: decodes, forks
// the keeper (which never returns), returns an exit code.
int keeper_main(std::string_view encoded);

// The keeper (session_keeper.cpp), in the process `session keep` forked:
// builds the sandbox, takes <session_dir>/lock, writes the state, writes
// "ok\n" or the error's message to ready_fd and closes it, then keeps the
// session until it is disposed, idles out, reaches its lifetime or its
// pid 1 dies; then removes everything and exits. Never returns.
[[noreturn]] void run_keeper(const SessionKey& key, const SessionSpec& spec, const std::string& id,
                             const std::string& session_dir, int ready_fd);

}  // namespace corral::session_state
