// Starting a session's keeper (session_state.hpp spawn_keeper) without
// running any of our code in a child of the caller: acquire() may be
// called from a multithreaded process, where a forked child may find a
// lock (malloc's, a C++ runtime's, ours) held by a thread that is not
// there. posix_spawn(3) (clone CLONE_VM|CLONE_VFORK, then only dup2, setsid
// and execve) starts the keeper program — the corral CLI's internal verb
// `session keep` — which gets the key and the spec encoded on its argv and
// runs run_keeper in a process of its own. Parent side.
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "corral/limits.hpp"
#include "session_state.hpp"

extern char** environ;

namespace corral::session_state {
namespace {

std::string hex(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) out += {kHex[c >> 4], kHex[c & 0xf]};
  return out.empty() ? "-" : out;
}

std::string unhex(std::string_view s) {
  if (s == "-") return {};
  std::string out;
  auto val = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (std::size_t i = 0; i + 1 < s.size(); i += 2) out += static_cast<char>(val(s[i]) << 4 | val(s[i + 1]));
  return out;
}

bool executable(const std::string& path) { return !path.empty() && ::access(path.c_str(), X_OK) == 0; }

std::string dir_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

}  // namespace

// "key hex" lines; hex keeps every byte of a path (newlines, spaces) intact.
std::string encode_keeper_spec(const SessionKey& key, const SessionSpec& spec, const std::string& id) {
  const Request& r = spec.base;
  std::string t;
  auto line = [&](const char* k, std::string_view v) { t += std::string(k) + " " + hex(v) + "\n"; };
  line("id", id);
  line("scope", key.scope);
  line("thread", key.thread);
  line("agent", key.agent);
  line("dir", spec.dir);
  line("idle", std::to_string(spec.idle_seconds));
  line("lifetime", std::to_string(spec.max_lifetime_seconds));
  line("net", r.net == NetworkAccess::none ? "none" : "host");
  line("loopback", r.loopback ? "1" : "0");
  if (r.rootfs) line("rootfs", *r.rootfs);
  if (r.cwd) line("cwd", *r.cwd);
  if (r.chdir) line("chdir", *r.chdir);
  if (r.user) line("user", std::to_string(*r.user));
  for (const auto& b : r.binds) {
    line("bind_source", b.source);
    line("bind_target", b.target);
    line("bind_writable", b.writable ? "1" : "0");
    line("bind_owner", b.owner_uid ? std::to_string(*b.owner_uid) + ":" + std::to_string(b.owner_gid.value_or(*b.owner_uid)) : "");
  }
  for (const auto& m : r.tmpfs) {
    line("tmpfs_path", m.path);
    line("tmpfs_bytes", m.bytes ? std::to_string(*m.bytes) : "");
  }
  for (const auto& d : r.dev_binds) line("dev_bind", d);
  for (const auto& info : all_limits())
    if (auto v = r.limits.raw(info.limit)) line("limit", std::string(info.name) + "=" + std::to_string(*v));
  return t;
}

Expected<KeeperSpec> decode_keeper_spec(std::string_view text) {
  KeeperSpec out;
  Request& r = out.spec.base;
  r.tier = Tier::container;
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view l = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    auto sp = l.find(' ');
    if (sp == std::string_view::npos) return Error::invalid("session keep: malformed spec line");
    std::string k(l.substr(0, sp));
    std::string v = unhex(l.substr(sp + 1));
    auto num = [&] { return std::strtoull(v.c_str(), nullptr, 10); };
    if (k == "id") out.id = v;
    else if (k == "scope") out.key.scope = v;
    else if (k == "thread") out.key.thread = v;
    else if (k == "agent") out.key.agent = v;
    else if (k == "dir") out.spec.dir = v;
    else if (k == "idle") out.spec.idle_seconds = std::strtod(v.c_str(), nullptr);
    else if (k == "lifetime") out.spec.max_lifetime_seconds = std::strtod(v.c_str(), nullptr);
    else if (k == "net") r.net = v == "none" ? NetworkAccess::none : NetworkAccess::host;
    else if (k == "loopback") r.loopback = v == "1";
    else if (k == "rootfs") r.rootfs = v;
    else if (k == "cwd") r.cwd = v;
    else if (k == "chdir") r.chdir = v;
    else if (k == "user") r.user = static_cast<uid_t>(num());
    else if (k == "bind_source") r.binds.push_back(MountBind{v, "", false});
    else if (k == "bind_target" && !r.binds.empty()) r.binds.back().target = v;
    else if (k == "bind_writable" && !r.binds.empty()) r.binds.back().writable = v == "1";
    else if (k == "bind_owner" && !r.binds.empty()) {
      if (!v.empty()) {
        r.binds.back().owner_uid = static_cast<uid_t>(std::strtoul(v.c_str(), nullptr, 10));
        r.binds.back().owner_gid = static_cast<gid_t>(std::strtoul(v.c_str() + v.find(':') + 1, nullptr, 10));
      }
    } else if (k == "tmpfs_path") r.tmpfs.push_back(TmpfsMount{v, std::nullopt});
    else if (k == "tmpfs_bytes" && !r.tmpfs.empty()) {
      if (!v.empty()) r.tmpfs.back().bytes = num();
    }
    else if (k == "dev_bind") r.dev_binds.push_back(v);
    else if (k == "limit") {
      auto eq = v.find('=');
      auto limit = limit_from_name(v.substr(0, eq));
      if (!limit || eq == std::string::npos) return Error::invalid("session keep: unknown limit in the spec");
      r.limits.set_raw(*limit, std::strtoull(v.c_str() + eq + 1, nullptr, 10));
    } else return Error::invalid("session keep: unknown spec line '" + k + "'");
  }
  if (!valid_id(out.id) || out.spec.dir.empty()) return Error::invalid("session keep: the spec names no session");
  return out;
}

namespace {
// set_default_keeper_program: set once at a program's start (the CLI's
// main), before any thread could read it.
std::string& default_keeper() {
  static std::string program;
  return program;
}
}  // namespace

std::string keeper_program(const SessionSpec& spec) {
  if (!spec.keeper_program.empty()) return spec.keeper_program;
  if (!default_keeper().empty()) return default_keeper();
  // Beside the library: <libdir>/../bin/corral for libcorral.so; for a
  // program linked with libcorral.a, <its dir>/../bin/corral (the build
  // tree's tests and benches, and the CLI itself).
  Dl_info info{};
  std::string object;
  if (::dladdr(reinterpret_cast<void*>(&keeper_program), &info) != 0 && info.dli_fname && info.dli_fname[0] == '/')
    object = info.dli_fname;
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  for (const std::string& from : {object, n > 0 ? std::string(exe, static_cast<std::size_t>(n)) : std::string()}) {
    if (from.empty()) continue;
    std::string candidate = dir_of(dir_of(from)) + "/bin/corral";
    if (executable(candidate)) return candidate;
  }
  // Else the first corral on PATH.
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!rest.empty()) {
    auto colon = rest.find(':');
    std::string candidate = std::string(rest.substr(0, colon)) + "/corral";
    if (rest.substr(0, colon).size() && executable(candidate)) return candidate;
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return {};
}

Expected<pid_t> spawn_keeper(const SessionKey& key, const SessionSpec& spec, const std::string& id, int ready_fd) {
  const std::string program = keeper_program(spec);
  if (program.empty())
    return Error(ENOENT, "session " + id +
                             ": no keeper program (the corral CLI) beside the library, beside this program or on "
                             "PATH; set SessionSpec::keeper_program");
  const std::string encoded = encode_keeper_spec(key, spec, id);
  std::vector<char*> argv{const_cast<char*>("corral"), const_cast<char*>("session"), const_cast<char*>("keep"),
                          const_cast<char*>(encoded.c_str()), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  // Nothing of the caller's: its stdio (a `$(corral session open)` must see
  // EOF), its other fds, its signal mask and dispositions; a session of its own.
  posix_spawn_file_actions_adddup2(&fa, ready_fd, 3);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDWR, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_RDWR, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_RDWR, 0);
  posix_spawn_file_actions_addclosefrom_np(&fa, 4);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, program.c_str(), &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Error::from_errno(rc, "session " + id + ": start the keeper '" + program + "'");
  return pid;
}

int keeper_main(std::string_view encoded) {
  auto k = decode_keeper_spec(encoded);
  if (!k) {
    std::string text = std::to_string(k.error().code()) + " " + k.error().message();
    (void)!::write(3, text.data(), text.size());
    return 2;
  }
  // A fresh, single-threaded process: forking again is safe here. The
  // keeper is then nobody's child in the caller's process.
  pid_t pid = ::fork();
  if (pid < 0) {
    std::string text = std::to_string(errno) + " session keeper: fork: " + std::strerror(errno);
    (void)!::write(3, text.data(), text.size());
    return 1;
  }
  if (pid != 0) return 0;
  const std::string sdir = k->spec.dir + "/" + k->id;
  run_keeper(k->key, k->spec, k->id, sdir, 3);
}

}  // namespace corral::session_state

namespace corral {

int session_keeper_main(std::string_view encoded) { return session_state::keeper_main(encoded); }

void set_default_keeper_program(std::string program) { session_state::default_keeper() = std::move(program); }

}  // namespace corral
