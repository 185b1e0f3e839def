// A session's host state (session_state.hpp): the state file, the locks,
// and the removal of what a dead keeper left. Parent side; blocking file I/O.
#include "session_state.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "cgroup_backend.hpp"
#include "session_cgroup.hpp"

namespace corral::session_state {
namespace {

std::string read_small(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return {};
  std::string text(16384, '\0');
  ssize_t n = ::read(fd.get(), text.data(), text.size());
  text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return text;
}

std::string opt(const std::optional<std::uint64_t>& v) { return v ? std::to_string(*v) : "-"; }
std::optional<std::uint64_t> parse_opt(const std::string& s) {
  if (s.empty() || s == "-") return std::nullopt;
  return std::strtoull(s.c_str(), nullptr, 10);
}

}  // namespace

double now_realtime() {
  struct timespec ts {};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

bool valid_id(std::string_view id) {
  return id.size() == 18 && id.substr(0, 2) == "s-" &&
         id.substr(2).find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

Expected<UniqueFd> lock_sessions_dir(const std::string& dir) {
  auto slash = dir.rfind('/');
  if (slash != std::string::npos && slash > 0) (void)::mkdir(dir.substr(0, slash).c_str(), 0755);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return Error::from_errno(errno, "sessions: mkdir '" + dir + "'");
  const std::string path = dir + "/.lock";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return Error::from_errno(errno, "sessions: open '" + path + "'");
  while (::flock(fd.get(), LOCK_EX) != 0)
    if (errno != EINTR) return Error::from_errno(errno, "sessions: flock '" + path + "'");
  return fd;
}

bool keeper_alive(const std::string& session_dir) {
  UniqueFd fd(::open((session_dir + "/lock").c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return false;
  // The keeper holds LOCK_EX: a shared lock is refused while it lives.
  if (::flock(fd.get(), LOCK_SH | LOCK_NB) == 0) return false;
  return errno == EWOULDBLOCK;
}

std::string format(const SessionInfo& i) {
  std::string t;
  auto line = [&](const char* k, const std::string& v) { t += std::string(k) + " " + v + "\n"; };
  line("scope", i.key.scope);
  line("thread", i.key.thread);
  line("agent", i.key.agent);
  line("fingerprint", i.fingerprint);
  line("keeper", std::to_string(i.keeper));
  line("pid1", std::to_string(i.pid1));
  line("pidns", std::to_string(i.pidns_inode));
  line("outside_uid", std::to_string(i.outside_uid));
  line("outside_gid", std::to_string(i.outside_gid));
  line("inside_uid", std::to_string(i.inside_uid));
  line("memory_bytes", opt(i.memory_bytes));
  line("process_count", opt(i.process_count));
  line("created", std::to_string(i.created));
  line("idle_seconds", std::to_string(i.idle_seconds));
  line("max_lifetime_seconds", std::to_string(i.max_lifetime_seconds));
  for (const auto& d : i.cgroup_dirs) line("cgroup", d);
  return t;
}

SessionInfo parse(const std::string& text) {
  SessionInfo i;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    auto sp = line.find(' ');
    if (sp == std::string::npos) continue;
    std::string k = line.substr(0, sp), v = line.substr(sp + 1);
    auto num = [&] { return std::strtoull(v.c_str(), nullptr, 10); };
    if (k == "scope") i.key.scope = v;
    else if (k == "thread") i.key.thread = v;
    else if (k == "agent") i.key.agent = v;
    else if (k == "fingerprint") i.fingerprint = v;
    else if (k == "keeper") i.keeper = static_cast<pid_t>(num());
    else if (k == "pid1") i.pid1 = static_cast<pid_t>(num());
    else if (k == "pidns") i.pidns_inode = num();
    else if (k == "outside_uid") i.outside_uid = static_cast<uid_t>(num());
    else if (k == "outside_gid") i.outside_gid = static_cast<gid_t>(num());
    else if (k == "inside_uid") i.inside_uid = static_cast<uid_t>(num());
    else if (k == "memory_bytes") i.memory_bytes = parse_opt(v);
    else if (k == "process_count") i.process_count = parse_opt(v);
    else if (k == "created") i.created = std::strtod(v.c_str(), nullptr);
    else if (k == "idle_seconds") i.idle_seconds = std::strtod(v.c_str(), nullptr);
    else if (k == "max_lifetime_seconds") i.max_lifetime_seconds = std::strtod(v.c_str(), nullptr);
    else if (k == "cgroup") i.cgroup_dirs.push_back(v);
  }
  return i;
}

Expected<SessionInfo> read(const std::string& dir, std::string_view id) {
  if (!valid_id(id)) return Error::invalid("session '" + std::string(id) + "': not a session id (s-<16 hex>)");
  const std::string sdir = dir + "/" + std::string(id);
  struct stat st {};
  if (::lstat(sdir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Error(ENOENT, "session " + std::string(id) + ": no such session under " + dir);
  std::string text = read_small(sdir + "/state");
  SessionInfo info = parse(text);
  info.id = std::string(id);
  info.dir = sdir;
  info.alive = keeper_alive(sdir);
  info.last_used = active_mtime(sdir);
  if (text.empty()) info.alive = false;  // being made, or a keeper that failed before its state
  return info;
}

Status write(const SessionInfo& info) {
  const std::string tmp = info.dir + "/state.tmp", path = info.dir + "/state";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return Error::from_errno(errno, "session: create '" + tmp + "'");
  std::string text = format(info);
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    return Error::from_errno(errno, "session: write '" + tmp + "'");
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Error::from_errno(errno, "session: rename to '" + path + "'");
  return {};
}

void touch_active(const std::string& session_dir) {
  const std::string path = session_dir + "/active";
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd) (void)::futimens(fd.get(), nullptr);
}

double active_mtime(const std::string& session_dir) {
  struct stat st {};
  if (::stat((session_dir + "/active").c_str(), &st) != 0) return 0;
  return static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) / 1e9;
}

void remove_files(const std::string& session_dir) {
  for (const char* f : {"state", "state.tmp", "active", "lock"}) (void)::unlink((session_dir + "/" + f).c_str());
  (void)::rmdir(session_dir.c_str());
}

void remove_leftovers(const SessionInfo& info, std::vector<std::string>& problems) {
  remove_exec_cgroups(info.cgroup_dirs, problems);
  // The session's own group: its pid 1 died with the keeper (PDEATHSIG),
  // which ended its pid namespace; anything left is killed, and on v2 its
  // leaf (init) goes before it.
  for (const auto& d : info.cgroup_dirs)
    if (auto st = kill_and_remove_cgroup_tree(d, 2000); !st) problems.push_back(st.error().message());
  remove_files(info.dir);
}

}  // namespace corral::session_state
