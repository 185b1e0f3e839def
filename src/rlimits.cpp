#include "corral/rlimits.hpp"

#include <linux/capability.h>

#include <cstdint>
#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <string>

#include "corral/capabilities.hpp"
#include "corral/syscalls.hpp"

namespace corral {
namespace {

// The kernel's struct rlimit64 for prlimit64(2): two u64, whatever the ABI.
struct KernelRlimit64 {
  std::uint64_t cur;
  std::uint64_t max;
};

constexpr const char* kResourceNames[] = {
    "RLIMIT_CPU",     "RLIMIT_FSIZE",  "RLIMIT_DATA",   "RLIMIT_STACK",
    "RLIMIT_CORE",    "RLIMIT_RSS",    "RLIMIT_NPROC",  "RLIMIT_NOFILE",
    "RLIMIT_MEMLOCK", "RLIMIT_AS",     "RLIMIT_LOCKS",  "RLIMIT_SIGPENDING",
    "RLIMIT_MSGQUEUE", "RLIMIT_NICE",  "RLIMIT_RTPRIO", "RLIMIT_RTTIME",
};
static_assert(sizeof(kResourceNames) / sizeof(kResourceNames[0]) == RLIM_NLIMITS);
static_assert(RlimitSet::kCapacity >= RLIM_NLIMITS);

std::string show(rlim_t v) { return v == RLIM_INFINITY ? "unlimited" : std::to_string(v); }

// /proc/sys/fs/nr_open: the ceiling on RLIMIT_NOFILE even with CAP_SYS_RESOURCE.
// Read once: it is a boot-time sysctl, and this runs on every run's prepare.
std::uint64_t nr_open() {
  // Plain read(2): an ifstream's locale set-up cost ~0.1 ms of a one-run CLI.
  static const std::uint64_t cached = [] {
    constexpr std::uint64_t kKernelDefault = 1048576;
    int fd = ::open("/proc/sys/fs/nr_open", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kKernelDefault;
    char buf[32];
    ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) return kKernelDefault;
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(buf, buf + n, v);
    return ec == std::errc() && end != buf ? v : kKernelDefault;
  }();
  return cached;
}

// Whether this process (and so a child forked from this thread) may set
// `resource` to `hard`. `who` names the entry in the message. ERANGE, not
// the EPERM the child would get: the request asks for a limit this host
// cannot hold, which the CLI answers as a refused limit (exit 2), not as a
// run corral could not start (125).
Status check_one(int resource, rlim_t hard, const std::string& who, OwnHardLimits* ours = nullptr) {
  if (resource == RLIMIT_NOFILE && hard != RLIM_INFINITY && hard > nr_open())
    return Error(ERANGE, "rlimits: " + who + "=" + show(hard) + " is above /proc/sys/fs/nr_open (" +
                            std::to_string(nr_open()) + "), which no process can exceed");
  if (resource == RLIMIT_NOFILE && hard == RLIM_INFINITY)
    return Error(ERANGE, "rlimits: " + who + " cannot be unlimited (the kernel caps it at nr_open)");
  struct rlimit current {};
  if (ours) current.rlim_max = ours->hard(resource);
  else if (getrlimit(resource, &current) != 0) return Error::from_errno(errno, "rlimits: getrlimit " + who);
  if (hard <= current.rlim_max || has_effective_capability(CAP_SYS_RESOURCE)) return {};
  return Error(ERANGE, "rlimits: " + who + "=" + show(hard) + " is above this process's hard " +
                          rlimit_resource_name(resource) + " (" + show(current.rlim_max) +
                          ") and raising it needs CAP_SYS_RESOURCE, which is not effective");
}

}  // namespace

const char* rlimit_resource_name(int resource) noexcept {
  if (resource < 0 || resource >= RLIM_NLIMITS) return "RLIMIT_?";
  return kResourceNames[resource];
}

RlimitSet::RlimitSet() noexcept { set(RLIMIT_CORE, 0, 0); }

RlimitSet& RlimitSet::set(int resource, rlim_t soft, rlim_t hard) noexcept {
  Fault fault = Fault::none;
  if (resource < 0 || resource >= RLIM_NLIMITS) fault = Fault::bad_resource;
  else if (soft > hard) fault = Fault::soft_above_hard;
  if (fault != Fault::none) {
    if (fault_ == Fault::none) {
      fault_ = fault;
      faulty_ = {resource, soft, hard};
    }
    return *this;
  }
  for (std::size_t i = 0; i < count_; ++i) {
    if (entries_[i].resource == resource) {
      entries_[i].soft = soft;
      entries_[i].hard = hard;
      return *this;
    }
  }
  // One entry per resource in [0, RLIM_NLIMITS) and kCapacity >= RLIM_NLIMITS:
  // never full.
  entries_[count_++] = {resource, soft, hard};
  return *this;
}

Status RlimitSet::status() const {
  switch (fault_) {
    case Fault::none:
      return {};
    case Fault::bad_resource:
      return Error::invalid("rlimits: resource " + std::to_string(faulty_.resource) +
                            " is not an RLIMIT_* number (0.." + std::to_string(RLIM_NLIMITS - 1) + ")");
    case Fault::soft_above_hard:
      return Error::invalid(std::string("rlimits: ") + rlimit_resource_name(faulty_.resource) + ": soft " +
                            show(faulty_.soft) + " above hard " + show(faulty_.hard));
  }
  return {};
}

const RlimitEntry* RlimitSet::find(int resource) const noexcept {
  for (std::size_t i = 0; i < count_; ++i)
    if (entries_[i].resource == resource) return &entries_[i];
  return nullptr;
}

rlim_t OwnHardLimits::hard(int resource) {
  if (resource < 0 || static_cast<std::size_t>(resource) >= hard_.size()) return RLIM_INFINITY;
  const auto i = static_cast<std::size_t>(resource);
  if (!known_[i]) {
    struct rlimit current {};
    if (getrlimit(resource, &current) != 0) return RLIM_INFINITY;  // not remembered: asked again next time
    hard_[i] = current.rlim_max;
    known_[i] = true;
  }
  return hard_[i];
}

Expected<RlimitSet> rlimits_from_limits(const Limits& limits, OwnHardLimits* ours) {
  RlimitSet set;
  for (const LimitInfo& info : all_limits()) {
    if (info.rlimit_resource < 0) continue;  // enforced elsewhere (supervisor, workspace)
    auto value = limits.get(info.limit);
    if (!value) continue;
    std::string who(info.name);
    if (*value == 0 && !info.zero_allowed) return Error::invalid("rlimits: " + who + " must be at least 1");
    if (*value >= (std::uint64_t{1} << 63))
      return Error(ERANGE, "rlimits: " + who + "=" + std::to_string(*value) + " is too large (max 2^63-1)");
    rlim_t soft = *value;
    // SIGXCPU at the soft limit lets the outcome say "cpu"; the kernel
    // sends SIGKILL at the hard limit if the program ignores SIGXCPU.
    rlim_t hard = info.limit == Limit::cpu_seconds ? soft + 1 : soft;
    if (auto ok = check_one(info.rlimit_resource, hard, who, ours); !ok) return std::move(ok).error();
    set.set(info.rlimit_resource, soft, hard);
  }
  if (auto ok = set.status(); !ok) return std::move(ok).error();
  return set;
}

Status check_rlimits_allowed(const RlimitSet& set) {
  if (auto ok = set.status(); !ok) return ok;
  for (const RlimitEntry& e : set.entries())
    if (auto ok = check_one(e.resource, e.hard, rlimit_resource_name(e.resource)); !ok) return ok;
  return {};
}

// Runs in the child; async-signal-safe: raw prlimit64 on our own pid (0),
// no allocation, errno untouched.
int apply_rlimits_in_child(const RlimitSet& set) noexcept {
  for (const RlimitEntry& e : set.entries()) {
    KernelRlimit64 lim{e.soft, e.hard};
    long r = sys::call(SYS_prlimit64, 0, e.resource, reinterpret_cast<long>(&lim), 0);
    if (int err = sys::error_of(r)) return err;
  }
  return 0;
}

}  // namespace corral
