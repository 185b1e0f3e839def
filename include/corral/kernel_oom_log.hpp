// The kernel's log of its OOM kills (/dev/kmsg): the one per-process record
// that the OOM killer, and not the program, sent a SIGKILL. A run with a
// memory cgroup of its own has its cgroup's counters for that; a run without
// one (no memory_bytes, or a tier where memory_bytes is RLIMIT_AS) dies of a
// host-wide OOM, or of an enclosing cgroup's (a systemd unit's MemoryMax, a
// Kubernetes pod's limit), with nothing else to tell it from a program that
// killed itself.
//
// What the kernel writes, once per victim, after it has counted the kill in
// /proc/vmstat (oom_kill) and sent the SIGKILL (mm/oom_kill.c):
//   "<constraint>: Killed process <pid> (<comm>) total-vm:...kB, ...,
//    UID:<uid> pgtables:...kB oom_score_adj:<n>"
// <constraint> is "Out of memory" (the host), "Memory cgroup out of memory"
// (a cgroup's limit) or "Out of memory (oom_kill_allocating_task)"; the pid
// is the victim's in the initial pid namespace and the uid in the initial
// user namespace. UID: is there since Linux 5.3.
//
// Only the kernel's own records count: userspace that may write /dev/kmsg
// (root) gets facility LOG_USER or another it names, never LOG_KERN, so a
// program cannot forge one.
//
// Who reads it: a supervisor, on one thread (not thread-safe). Opening it
// needs CAP_SYSLOG where kernel.dmesg_restrict is 1 (Debian's default), so
// in practice root.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "corral/fd.hpp"
#include "corral/status.hpp"

namespace corral {

struct OomKillRecord {
  std::uint64_t seq = 0;       // the record's sequence number in the kernel log
  pid_t pid = 0;               // the victim, in the initial pid namespace
  std::optional<uid_t> uid;    // its uid in the initial user namespace (5.3+)
  std::string comm;            // its name as the kernel had it (at most 15 bytes)
  std::string constraint;      // the text before ": Killed process"
};

// One /dev/kmsg record ("<prio>,<seq>,<usec>,<flags>;<text>", continuation
// lines after it ignored): the kill it records, or nothing when it is not a
// kernel-written OOM kill. Pure.
std::optional<OomKillRecord> parse_oom_kill_record(std::string_view record);

// /proc/vmstat's oom_kill: every OOM kill on the host since boot (4.13+).
Expected<std::uint64_t> host_oom_kill_count();

class KernelOomLog {
 public:
  // /dev/kmsg opened to read from its end on. EPERM without CAP_SYSLOG
  // (dmesg_restrict), ENOENT where there is none (some containers).
  static Expected<KernelOomLog> open();

  // Reads what the kernel logged since the last read, keeping the OOM
  // kills, and returns the sequence number every record logged after now
  // has at least: a run's mark, taken right before it starts. A kill logged
  // before the mark is never the run's, even when its pid or uid was a
  // process's that ended before the run began (pids and uids are reused).
  std::uint64_t mark();

  // The kills logged at or after `mark` of the process `pid`, or of any
  // process of `uid` when one is given (a uid that is the run's alone),
  // taken out of those kept. One read when nothing new was logged.
  //
  // `expect_one`: the caller saw a SIGKILL nothing else explains. The
  // kernel logs a kill after it has counted it and sent the signal, so the
  // victim's end can be seen before its record: when nothing matched and
  // /proc/vmstat counts more kills than the log has shown, this waits up to
  // 100 ms for the rest to be logged (only then; records the kernel log
  // overwrote before they were read are given up on after one such wait).
  std::vector<OomKillRecord> take_kills(std::uint64_t mark, pid_t pid, std::optional<uid_t> uid,
                                        bool expect_one = false);

  // How many OOM kills are kept, not yet taken (kept to at most kKeptKills,
  // the oldest dropped first).
  std::size_t kept() const noexcept { return kills_.size(); }
  static constexpr std::size_t kKeptKills = 4096;

 private:
  KernelOomLog() = default;
  void read_new_records();
  std::vector<OomKillRecord> take_matching(std::uint64_t mark, pid_t pid, std::optional<uid_t> uid);

  UniqueFd fd_;
  std::uint64_t next_seq_ = 0;        // past every record read so far
  std::deque<OomKillRecord> kills_;   // read, not yet taken, in log order
  // /proc/vmstat's oom_kill when the log was opened, less the kills whose
  // records were given up on: it and the kills read since add up to the
  // count when every kill counted so far has been read.
  std::uint64_t counted_base_ = 0;
  std::uint64_t kills_read_ = 0;
};

}  // namespace corral
