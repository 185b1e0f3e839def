#include "corral/kernel_oom_log.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>

#include "text.hpp"

namespace corral {
namespace {

// A kernel log record is at most about 1 KiB of text plus its dictionary;
// a read into a buffer too small for the next record fails with EINVAL.
constexpr std::size_t kRecordBuffer = 8192;
constexpr int kPendingWaitMs = 100;

template <typename T>
bool parse_number(std::string_view text, T& out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

// The digits at the start of `text` (and the view moved past them).
template <typename T>
bool take_number(std::string_view& text, T& out) {
  std::size_t n = 0;
  while (n < text.size() && text[n] >= '0' && text[n] <= '9') ++n;
  if (!parse_number(text.substr(0, n), out)) return false;
  text.remove_prefix(n);
  return true;
}

}  // namespace

std::optional<OomKillRecord> parse_oom_kill_record(std::string_view record) {
  // "<prio>,<seq>,<usec>,<flags>[,more];<text>\n[ KEY=value\n...]"
  const std::size_t semi = record.find(';');
  if (semi == std::string_view::npos) return std::nullopt;
  auto fields = detail::split(record.substr(0, semi), ',');
  if (fields.size() < 4) return std::nullopt;
  unsigned prio = 0;
  OomKillRecord kill;
  if (!parse_number(fields[0], prio) || !parse_number(fields[1], kill.seq)) return std::nullopt;
  // Facility 0 (LOG_KERN) only: what userspace writes is never it.
  if ((prio >> 3) != 0) return std::nullopt;
  std::string_view text = record.substr(semi + 1);
  if (auto nl = text.find('\n'); nl != std::string_view::npos) text = text.substr(0, nl);
  constexpr std::string_view kKilled = ": Killed process ";
  const std::size_t at = text.find(kKilled);
  if (at == std::string_view::npos) return std::nullopt;
  kill.constraint = std::string(text.substr(0, at));
  if (kill.constraint.find("ut of memory") == std::string::npos) return std::nullopt;
  std::string_view rest = text.substr(at + kKilled.size());
  if (!take_number(rest, kill.pid) || kill.pid <= 0 || rest.substr(0, 2) != " (") return std::nullopt;
  rest.remove_prefix(2);
  // The comm may hold ") total-vm:" itself: what follows the last one is
  // the kernel's.
  constexpr std::string_view kAfterComm = ") total-vm:";
  const std::size_t close = rest.rfind(kAfterComm);
  if (close == std::string_view::npos) return std::nullopt;
  kill.comm = std::string(rest.substr(0, close));
  std::string_view figures = rest.substr(close + kAfterComm.size());
  if (auto u = figures.find(" UID:"); u != std::string_view::npos) {
    std::string_view digits = figures.substr(u + 5);
    uid_t uid = 0;
    if (take_number(digits, uid)) kill.uid = uid;
  }
  return kill;
}

Expected<std::uint64_t> host_oom_kill_count() {
  auto text = detail::read_to_end("/proc/vmstat");
  if (!text) return std::move(text).error();
  constexpr std::string_view kKey = "oom_kill ";
  std::string_view all = *text;
  for (std::size_t at = 0; at < all.size();) {
    std::size_t nl = all.find('\n', at);
    std::string_view line = all.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at);
    std::uint64_t n = 0;
    if (line.substr(0, kKey.size()) == kKey && parse_number(line.substr(kKey.size()), n)) return n;
    if (nl == std::string_view::npos) break;
    at = nl + 1;
  }
  return Error(ENOENT, "/proc/vmstat: no oom_kill count (Linux before 4.13)");
}

Expected<KernelOomLog> KernelOomLog::open() {
  KernelOomLog log;
  log.fd_ = UniqueFd(::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!log.fd_) {
    const int err = errno;
    Error e = Error::from_errno(err, "kernel OOM log: open /dev/kmsg");
    if (err == EPERM) return Error(err, e.message() + " (reading the kernel log needs CAP_SYSLOG while kernel.dmesg_restrict is 1)");
    return e;
  }
  // Counted before the log is positioned: a kill in between is counted and
  // not read, which costs one wait (take_kills), never a kill overlooked.
  auto counted = host_oom_kill_count();
  if (!counted) return std::move(counted).error().context("kernel OOM log");
  log.counted_base_ = *counted;
  if (::lseek(log.fd_.get(), 0, SEEK_END) < 0) return Error::from_errno(errno, "kernel OOM log: seek /dev/kmsg to its end");
  return log;
}

void KernelOomLog::read_new_records() {
  char buf[kRecordBuffer];
  for (;;) {
    ssize_t n = ::read(fd_.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      // EPIPE: records were overwritten before we read them; the next read
      // goes on from the oldest one left.
      if (errno == EPIPE) continue;
      return;  // EAGAIN: all read
    }
    if (n == 0) return;
    std::string_view record(buf, static_cast<std::size_t>(n));
    std::uint64_t seq = 0;
    if (auto comma = record.find(','); comma != std::string_view::npos) {
      std::string_view rest = record.substr(comma + 1);
      if (take_number(rest, seq) && seq >= next_seq_) next_seq_ = seq + 1;
    }
    auto kill = parse_oom_kill_record(record);
    if (!kill) continue;
    ++kills_read_;
    if (kills_.size() == kKeptKills) kills_.pop_front();
    kills_.push_back(std::move(*kill));
  }
}

std::uint64_t KernelOomLog::mark() {
  read_new_records();
  return next_seq_;
}

std::vector<OomKillRecord> KernelOomLog::take_matching(std::uint64_t mark, pid_t pid, std::optional<uid_t> uid) {
  std::vector<OomKillRecord> taken;
  for (auto it = kills_.begin(); it != kills_.end();) {
    const bool ours = it->seq >= mark && (it->pid == pid || (uid && it->uid == uid));
    if (!ours) {
      ++it;
      continue;
    }
    taken.push_back(std::move(*it));
    it = kills_.erase(it);
  }
  return taken;
}

std::vector<OomKillRecord> KernelOomLog::take_kills(std::uint64_t mark, pid_t pid, std::optional<uid_t> uid,
                                                    bool expect_one) {
  read_new_records();
  auto taken = take_matching(mark, pid, uid);
  if (!taken.empty() || !expect_one) return taken;
  // Kills counted and not read yet. A kill counted before the log was
  // opened and logged after it was read twice: the base takes it back.
  auto unread = [&]() -> std::uint64_t {
    auto counted = host_oom_kill_count();
    if (!counted) return 0;
    if (*counted < counted_base_ + kills_read_) counted_base_ = *counted - std::min(*counted, kills_read_);
    return *counted - std::min(*counted, counted_base_ + kills_read_);
  };
  if (unread() == 0) return taken;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kPendingWaitMs);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    read_new_records();
    taken = take_matching(mark, pid, uid);
    if (!taken.empty()) return taken;
    if (unread() == 0) return taken;
  }
  // The kills counted and never read were overwritten, or logged where we
  // cannot see them: given up on, so that no later run waits for them.
  counted_base_ += unread();
  return taken;
}

}  // namespace corral
