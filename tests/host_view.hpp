// A sandboxed program seen from the host, not through what it reports:
// found in the host's /proc by its command line (root sees every process),
// and its working directory and state read there while it runs.
#pragma once

#include <dirent.h>
#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "corral/supervisor.hpp"
#include "support.hpp"

namespace corral_test {

// The host pid of a process whose command line is exactly `argv`, 0 if none.
inline pid_t host_pid_with_argv(const std::vector<std::string>& argv) {
  std::string want;
  for (const auto& a : argv) want += a + std::string(1, '\0');
  DIR* d = opendir("/proc");
  pid_t found = 0;
  while (dirent* e = d && !found ? readdir(d) : nullptr)
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9' &&
        read_file("/proc/" + std::string(e->d_name) + "/cmdline") == want)
      found = static_cast<pid_t>(std::stol(e->d_name));
  if (d) closedir(d);
  return found;
}

// What a submitted request's program was seen as from the host: its pid,
// and the directory its /proc/PID/cwd resolves to (stat through the magic
// link, as the host sees it), taken once it has exec'd `argv`; then the
// run is cancelled. pid 0: it never ran `argv` (the Result says why).
struct HostSeen {
  pid_t pid = 0;
  struct stat cwd {};
  bool cwd_ok = false;
  std::shared_ptr<corral::Result> result;
};

inline HostSeen see_from_host(corral::Supervisor& sup, corral::Request r, double seconds = 10) {
  HostSeen seen;
  const std::vector<std::string> argv = r.argv;
  corral::RunCallbacks cb;
  auto* out = &seen.result;
  cb.on_result = [out](const corral::Result& res) { *out = std::make_shared<corral::Result>(res); };
  auto handle = sup.submit(std::move(r), cb);
  cr_assert(handle.ok(), "submit: %s", handle.ok() ? "" : handle.error().message().c_str());
  for (int i = 0; i < static_cast<int>(seconds / 0.02) && !seen.result && !seen.pid; ++i) {
    (void)sup.run_once(0.02);
    seen.pid = host_pid_with_argv(argv);
  }
  if (seen.pid)
    seen.cwd_ok = stat(("/proc/" + std::to_string(seen.pid) + "/cwd").c_str(), &seen.cwd) == 0;
  if (!seen.result) handle->cancel();
  while (!seen.result) (void)sup.run_once(1);
  return seen;
}

inline bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

}  // namespace corral_test
