// Sessions (session.hpp): get-or-create, lookup, disposal and the sweep,
// all from host state under the sessions directory. Parent side.
#include "corral/session.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "corral/capture.hpp"
#include "corral/container.hpp"
#include "session_state.hpp"

namespace corral {

namespace ss = session_state;

namespace {

Status check_key(const SessionKey& key) {
  auto check = [](const char* what, const std::string& v, bool required) -> Status {
    if (required && v.empty()) return Error::invalid(std::string("session key: ") + what + " is empty");
    if (v.size() > 256) return Error::invalid(std::string("session key: ") + what + " is longer than 256 bytes");
    if (v.find('\n') != std::string::npos || v.find('\0') != std::string::npos)
      return Error::invalid(std::string("session key: ") + what + " holds a newline or a NUL");
    return {};
  };
  if (auto st = check("scope", key.scope, true); !st) return st;
  if (auto st = check("thread", key.thread, true); !st) return st;
  return check("agent", key.agent, false);
}

bool same_key(const SessionKey& a, const SessionKey& b) {
  return a.scope == b.scope && a.thread == b.thread && a.agent == b.agent;
}

std::vector<std::string> session_ids(const std::string& dir) {
  std::vector<std::string> ids;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (struct dirent* e = ::readdir(d))
      if (ss::valid_id(e->d_name)) ids.emplace_back(e->d_name);
    ::closedir(d);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

// With <dir>/.lock held: a session nobody keeps is gone; remove what it left.
bool sweep_one_locked(const std::string& dir, const std::string& id, std::vector<std::string>& problems) {
  auto info = ss::read(dir, id);
  if (!info || info->alive) return false;
  ss::remove_leftovers(*info, problems);
  return true;
}

// Starts the keeper, detached (spawn_keeper: setsid, then a fork of its own
// so it is nobody's child here), and waits for its "ok" or its error.
Expected<SessionInfo> create_session(const SessionKey& key, const SessionSpec& spec, const std::string& id) {
  const std::string sdir = spec.dir + "/" + id;
  if (::mkdir(sdir.c_str(), 0700) != 0) return Error::from_errno(errno, "session " + id + ": mkdir '" + sdir + "'");
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    ss::remove_files(sdir);
    return Error::from_errno(errno, "session " + id + ": pipe");
  }
  auto spawned = ss::spawn_keeper(key, spec, id, ready[1]);
  if (!spawned) {
    ::close(ready[0]);
    ::close(ready[1]);
    ss::remove_files(sdir);
    return std::move(spawned).error();
  }
  const pid_t pid = *spawned;
  ::close(ready[1]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string text;
  char buf[4096];
  for (;;) {
    struct pollfd p = {ready[0], POLLIN, 0};
    if (::poll(&p, 1, 60000) <= 0) break;
    ssize_t n = ::read(ready[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(ready[0]);
  if (text == "ok\n") {
    auto info = ss::read(spec.dir, id);
    if (info && info->alive) return info;
    ss::remove_files(sdir);
    return Error(ESRCH, "session " + id + ": the keeper reported ready but is gone");
  }
  ss::remove_files(sdir);
  if (text.empty()) return Error(EIO, "session " + id + ": the keeper ended without a word");
  int code = std::atoi(text.c_str());
  auto sp = text.find(' ');
  return Error(code > 0 ? code : EIO, sp == std::string::npos ? text : text.substr(sp + 1));
}

}  // namespace

std::string session_fingerprint(const SessionSpec& spec) {
  const Request& r = spec.base;
  std::string f = "tier=" + std::string(to_string(r.tier));
  f += ";net=" + std::string(r.net == NetworkAccess::none ? "none" : "host");
  f += ";rootfs=" + r.rootfs.value_or("");
  f += ";cwd=" + r.cwd.value_or("");
  f += ";user=" + (r.user ? std::to_string(*r.user) : std::string("-"));
  for (const auto& b : r.binds) f += ";bind=" + b.source + ":" + b.target + (b.writable ? ":rw" : ":ro");
  for (Limit l : {Limit::memory_bytes, Limit::process_count, Limit::workspace_bytes}) {
    auto v = r.limits.get(l);
    f += ";" + std::string(limit_name(l)) + "=" + (v ? std::to_string(*v) : std::string("-"));
  }
  return Sha256::hex_of(f).substr(0, 16);
}

std::string session_id_for(const SessionKey& key) {
  std::string k = key.scope;
  k += '\0';
  k += key.thread;
  k += '\0';
  k += key.agent;
  return "s-" + Sha256::hex_of(k).substr(0, 16);
}

Expected<SessionInfo> acquire_session(const SessionKey& key, const SessionSpec& spec) {
  if (auto st = check_key(key); !st) return std::move(st).error();
  if (spec.base.tier != Tier::container)
    return Error::invalid("session: tier " + std::string(to_string(spec.base.tier)) +
                          ": sessions are container-tier sandboxes (--tier container)");
  const std::string id = session_id_for(key);
  const std::string fp = session_fingerprint(spec);
  // The fast path: a live session under this key, no lock taken.
  if (auto info = ss::read(spec.dir, id); info && info->alive) {
    if (!same_key(info->key, key)) return Error(EEXIST, "session " + id + ": the id is another key's");
    if (info->fingerprint != fp)
      return Error(EEXIST, "session " + id + " (scope '" + key.scope + "', thread '" + key.thread +
                               "') is live with another spec (tier, network, binds, rootfs, user or ceilings differ); "
                               "dispose it first");
    ss::touch_active(info->dir);
    return info;
  }
  auto lock = ss::lock_sessions_dir(spec.dir);
  if (!lock) return std::move(lock).error();
  std::vector<std::string> problems;
  if (auto info = ss::read(spec.dir, id); info) {
    if (info->alive) {
      if (info->fingerprint != fp)
        return Error(EEXIST, "session " + id + " is live with another spec; dispose it first");
      ss::touch_active(info->dir);
      return info;
    }
    ss::remove_leftovers(*info, problems);
  }
  std::size_t live = 0;
  for (const auto& other : session_ids(spec.dir))
    if (ss::keeper_alive(spec.dir + "/" + other)) ++live;
  if (live >= spec.max_sessions)
    return Error(EAGAIN, "session: " + std::to_string(live) + " live sessions on this host, the cap is " +
                             std::to_string(spec.max_sessions) + "; dispose some first");
  return create_session(key, spec, id);
}

Expected<SessionInfo> find_session(std::string_view id, const std::string& dir) {
  auto info = ss::read(dir, id);
  if (!info) return info;
  if (info->alive) return info;
  if (auto lock = ss::lock_sessions_dir(dir)) {
    std::vector<std::string> problems;
    sweep_one_locked(dir, std::string(id), problems);
  }
  return Error(ESRCH, "session " + std::string(id) + ": its keeper is gone (swept)");
}

std::vector<SessionInfo> list_sessions(const std::string& dir) {
  std::vector<SessionInfo> out;
  for (const auto& id : session_ids(dir))
    if (auto info = ss::read(dir, id)) out.push_back(std::move(*info));
  return out;
}

Status dispose_session(std::string_view id, const std::string& dir) {
  auto info = ss::read(dir, id);
  if (!info) return std::move(info).error();
  const std::string sid(id);
  auto sweep = [&]() -> Status {
    auto lock = ss::lock_sessions_dir(dir);
    if (!lock) return std::move(lock).error();
    std::vector<std::string> problems;
    sweep_one_locked(dir, sid, problems);
    if (!problems.empty()) return Error(EBUSY, "session " + sid + ": " + problems.front());
    return {};
  };
  if (!info->alive) return sweep();
  auto keeper = Pidfd::open(info->keeper);
  // The pidfd is the keeper's only if the lock is still held after it was
  // opened (a pid is not reused while its process lives).
  if (!keeper || !ss::keeper_alive(info->dir)) return sweep();
  if (int e = keeper->send_signal(SIGTERM); e && e != ESRCH)
    return Error::from_errno(e, "session " + sid + ": signal its keeper");
  struct pollfd p = {keeper->fd(), POLLIN, 0};
  int n;
  while ((n = ::poll(&p, 1, 10000)) < 0 && errno == EINTR) {
  }
  if (n == 0) return Error(ETIMEDOUT, "session " + sid + ": its keeper did not end within 10 s");
  struct stat st {};
  if (::lstat(info->dir.c_str(), &st) == 0) return sweep();
  return {};
}

int dispose_scope(std::string_view scope, std::optional<std::string_view> thread, const std::string& dir,
                  std::vector<std::string>* problems, std::vector<std::string>* disposed) {
  int count = 0;
  for (const auto& info : list_sessions(dir)) {
    if (info.key.scope != scope || (thread && info.key.thread != *thread)) continue;
    if (auto st = dispose_session(info.id, dir)) {
      ++count;
      if (disposed) disposed->push_back(info.id);
    } else if (problems) {
      problems->push_back(st.error().message());
    }
  }
  return count;
}

int sweep_sessions(const std::string& dir) {
  auto lock = ss::lock_sessions_dir(dir);
  if (!lock) return 0;
  int count = 0;
  std::vector<std::string> problems;
  for (const auto& id : session_ids(dir))
    if (sweep_one_locked(dir, id, problems)) ++count;
  return count;
}

Request session_exec_request(std::string_view id, Request request) {
  request.session = std::string(id);
  request.tier = Tier::container;
  return request;
}

SessionTarget session_target(const SessionInfo& info) {
  SessionTarget t;
  t.id = info.id;
  t.pid1 = info.pid1;
  t.pidns_inode = info.pidns_inode;
  t.inside_uid = info.inside_uid;
  t.cgroup_dirs = info.cgroup_dirs;
  t.memory_bytes = info.memory_bytes;
  t.process_count = info.process_count;
  t.active_file = info.dir + "/active";  // session_state.hpp: <dir>/<id>/active
  return t;
}

}  // namespace corral
