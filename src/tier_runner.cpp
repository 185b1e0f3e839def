// The tier runners' common part (tier_runner.hpp): which runner a tier has,
// and the steps both families share (the program's PATH search, the 32-bit
// check, the seccomp filter by network profile).
#include "corral/tier_runner.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

extern char** environ;

namespace corral {

const TierRunner& tier_runner(Tier tier) {
  switch (tier) {
    case Tier::container: return container_runner();
    case Tier::none:
    case Tier::os_process: break;
  }
  return process_runner();
}

const char* find_env(const char* name) {
  std::size_t len = std::strlen(name);
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, name, len) == 0 && (*e)[len] == '=') return *e + len + 1;
  return nullptr;
}

// execvp semantics, decided in the parent: a name with a slash is used as
// is; otherwise every PATH entry of the CHILD's environment is a candidate,
// tried in order by the child (ENOENT and ENOTDIR go on to the next, as in
// execvp). An empty entry means the cwd for execvp; a sandbox does not
// search it. With `existing`, entries where nothing by that name exists are
// dropped: the child would only collect EACCES from directories its uid
// cannot search and report that instead of the truth, ENOENT. Without it
// (the process tiers, where it cost a stat per PATH entry per run, most of
// them after the entry the program is found in) that check is made only
// when the exec failed (explain_exec_failure).
std::vector<std::string> exec_candidates(const std::string& program, const std::string& child_path, bool existing) {
  if (program.find('/') != std::string::npos) return {program};
  std::vector<std::string> out;
  std::string_view rest = child_path.empty() ? std::string_view("/usr/local/bin:/usr/bin:/bin") : child_path;
  while (true) {
    auto colon = rest.find(':');
    std::string_view dir = rest.substr(0, colon);
    if (!dir.empty()) {
      std::string candidate = std::string(dir) + "/" + program;
      struct stat st;
      if (!existing || ::stat(candidate.c_str(), &st) == 0 || errno != ENOENT) out.push_back(std::move(candidate));
    }
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  if (out.empty()) out.push_back(program);  // execve then fails with ENOENT, as it should
  return out;
}

std::string tried_program(const ChildPlan& plan) {
  std::string out;
  for (const auto& p : plan.exec_paths) out += (out.empty() ? "" : ", ") + p;
  if (out.empty() && !plan.argv_storage.empty()) out = plan.argv_storage.front();
  return out;
}

// The tiers' seccomp filters are for x86_64 (seccomp.hpp): a 32-bit program
// (i386, or x32, which is ELFCLASS32 too) would die of SIGSYS at its first
// system call. Refused before anything runs, with the reason. Only a path
// the host can read is looked at (a container's /workspace or rootfs is
// not); a file that is not ELF is the kernel's to judge. The first
// candidate that opens is the file execve would run (PATH order).
Status refuse_32bit_program(const std::vector<std::string>& candidates) {
  // The first candidate that exists (access F_OK) is the one looked at.
  // Each is opened straight away: one that opens exists, so the access(2)
  // is asked only of one that does not open (one call a run instead of two);
  // one that exists but cannot be read stops the search unchecked.
  std::string path;
  UniqueFd fd;
  for (const auto& c : candidates) {
    fd.reset(::open(c.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (fd || ::access(c.c_str(), F_OK) == 0) {
      path = c;
      break;
    }
  }
  unsigned char ident[5] = {0};
  if (!fd || ::read(fd.get(), ident, sizeof ident) != static_cast<ssize_t>(sizeof ident)) return {};
  if (std::memcmp(ident, "\x7f" "ELF", 4) != 0 || ident[4] != 1 /* ELFCLASS32 */) return {};
  return Error(ENOEXEC, "could not start: '" + path +
                            "' is a 32-bit program; the tier's seccomp filter covers x86_64 system calls only and "
                            "would kill it (SIGSYS) at its first one (use --tier none, or a 64-bit build)");
}

Expected<std::shared_ptr<const SeccompProgram>> tier_seccomp(const char* net, MechanismCache* cache, bool notify) {
  std::string key = std::string("default,") + net + (notify ? "+notify" : "");
  if (cache)
    if (auto it = cache->seccomp.find(key); it != cache->seccomp.end()) return it->second;
  SeccompSpec spec;
  spec.profile("default");
  spec.profile(net);
  spec.notify_socket_refusals(notify);
  auto program = prepare(spec);
  if (!program && notify) return tier_seccomp(net, cache, false);
  if (!program) return std::move(program).error();
  auto shared = std::make_shared<const SeccompProgram>(std::move(*program));
  if (cache) cache->seccomp[key] = shared;
  return shared;
}

}  // namespace corral
