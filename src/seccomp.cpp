#include "corral/seccomp.hpp"

#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <tuple>

#include "corral/fd.hpp"
#include "seccomp_bpf.hpp"
#include "seccomp_builtin.hpp"
#include "corral/syscalls.hpp"

namespace corral {
namespace {

#if defined(__x86_64__)
constexpr std::string_view kArchName = "x86_64";
#elif defined(__aarch64__)
constexpr std::string_view kArchName = "aarch64";
#endif

using detail::When;

struct Row {
  const char* syscall;
  int err;
  When when;
  // A refusal the supervisor may answer instead of the filter
  // (SeccompSpec::notify_socket_refusals): the network profiles' socket rows.
  bool notifiable = false;
};

struct Profile {
  std::string_view name;
  std::vector<Row> rows;
};

using detail::kCloneNewFlags;
using detail::kSafePersonas;

std::vector<Row> rows_always(int err, std::initializer_list<const char*> names) {
  std::vector<Row> rows;
  for (const char* n : names) rows.push_back({n, err, When::always});
  return rows;
}

void append(std::vector<Row>& to, const std::vector<Row>& rows) {
  to.insert(to.end(), rows.begin(), rows.end());
}

const std::vector<Profile>& profiles_table() {
  static const std::vector<Profile> table = [] {
    std::vector<Row> def = rows_always(
        EPERM,
        {// kernel code and kernel-wide state
         "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
         "create_module", "get_kernel_syms", "query_module", "bpf", "perf_event_open",
         "userfaultfd", "lookup_dcookie", "fanotify_init",
         // keyrings (not namespaced)
         "keyctl", "add_key", "request_key",
         // reaching into other processes
         "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd",
         "kcmp",
         // the mount family
         "mount", "umount2", "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig",
         "fspick", "mount_setattr", "pivot_root", "chroot",
         // namespaces
         "unshare", "setns",
         // io_uring: its own syscall surface, unseen by this filter
         "io_uring_setup", "io_uring_enter", "io_uring_register",
         // host-wide administration
         "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "iopl", "ioperm",
         "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "syslog", "vhangup",
         "sethostname", "setdomainname", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl",
         // file handles bypass path-based checks (the "shocker" escape)
         "open_by_handle_at", "name_to_handle_at"});
    def.push_back({"clone", EPERM, When::clone_new_namespace});
    // ENOSYS, not EPERM: libc (glibc >= 2.34 for threads and posix_spawn)
    // falls back to clone(2) on ENOSYS, where the flag check above applies.
    // clone3 passes its flags in memory, which seccomp cannot read.
    def.push_back({"clone3", ENOSYS, When::always});
    def.push_back({"personality", EPERM, When::personality_change});
    def.push_back({"ioctl", EPERM, When::tty_injection});
    // Set-user/group-id bits, as systemd's RestrictSUIDSGID=: a file the
    // program makes set-id outlives the run where the host reaches it (a
    // writable bind is idmapped, so the host sees the directory's owner as
    // the file's; a --write-path; the host's /tmp under tier process, owned
    // by a uid a later run reuses), and nosuid on the sandbox's mount does
    // nothing for the host's. S_ISGID too: a set-gid file runs with its
    // group for anyone. Every call that sets a mode; the 32-bit ABIs that
    // would reach them otherwise are killed by the filter's arch check.
    for (const char* name : {"chmod", "fchmod", "creat", "mkdir", "mknod"})
      def.push_back({name, EPERM, When::set_id_mode_arg1});
    for (const char* name : {"fchmodat", "fchmodat2", "mkdirat", "mknodat"})
      def.push_back({name, EPERM, When::set_id_mode_arg2});
    def.push_back({"open", EPERM, When::set_id_open});
    def.push_back({"openat", EPERM, When::set_id_openat});
    // openat2 passes its mode in a struct seccomp cannot read; ENOSYS, as
    // for clone3, sends libc and careful programs back to openat.
    def.push_back({"openat2", ENOSYS, When::always});

    // The network profiles are allow-lists of socket families, one per
    // network policy: a family nobody listed (vsock, which no network
    // namespace isolates; packet; bluetooth; AF_ALG; a family a later
    // kernel adds) is refused with EACCES. socketpair(2) is AF_UNIX only
    // in each. io_uring is denied too: IORING_OP_SOCKET makes sockets
    // without the socket syscall.
    auto network = [](When socket_rule) {
      std::vector<Row> rows{{"socket", EACCES, socket_rule, true}, {"socketpair", EACCES, When::socket_not_unix, true}};
      append(rows, rows_always(EPERM, {"io_uring_setup", "io_uring_enter", "io_uring_register"}));
      return rows;
    };
    return std::vector<Profile>{
        {"default", std::move(def)},
        // A closed network: AF_UNIX only.
        {"no-network", network(When::socket_not_unix)},
        // For an egress allow-list: Landlock's TCP rules (ABI >= 4) bound
        // where TCP may connect, and cover nothing else, so every other
        // socket (UDP, raw, SCTP, MPTCP, packet, netlink, ...) is closed here.
        {"tcp-only", network(When::socket_not_unix_tcp)},
        // A network namespace of the run's own (lo brought up before the
        // filter): AF_UNIX and IP, which reach only that namespace.
        {"inet-only", network(When::socket_not_unix_inet)},
        // The host's network (tier process, net host): AF_UNIX, IP, and
        // netlink for what libc reads through it (getifaddrs, getaddrinfo's
        // AI_ADDRCONFIG); changing the host's network needs CAP_NET_ADMIN,
        // which the tier drops.
        {"host-network", network(When::socket_not_host_net)}};
  }();
  return table;
}

std::string known_profiles() {
  std::string out;
  for (const auto& p : profiles_table()) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

Expected<const Profile*> find_profile(std::string_view name) {
  for (const auto& p : profiles_table())
    if (p.name == name) return &p;
  return Error::invalid("seccomp: unknown profile '" + std::string(name) +
                        "' (known: " + known_profiles() + ")");
}

std::string_view condition_text(When when) {
  switch (when) {
    case When::always: return "";
    case When::clone_new_namespace: return "flags include CLONE_NEW*";
    case When::personality_change: return "persona other than 0, 0x8 (PER_LINUX32), 0xffffffff (query)";
    case When::socket_not_unix: return "domain other than AF_UNIX";
    case When::socket_not_unix_inet: return "domain other than AF_UNIX, AF_INET, AF_INET6";
    case When::socket_not_host_net: return "domain other than AF_UNIX, AF_INET, AF_INET6, AF_NETLINK";
    case When::socket_not_unix_tcp:
      return "domain other than AF_UNIX, AF_INET, AF_INET6, or an AF_INET/AF_INET6 socket other than "
             "SOCK_STREAM with protocol 0 or IPPROTO_TCP";
    case When::tty_injection: return "request TIOCSTI or TIOCLINUX";
    case When::set_id_mode_arg1:
    case When::set_id_mode_arg2: return "mode has S_ISUID or S_ISGID";
    case When::set_id_open:
    case When::set_id_openat: return "flags include O_CREAT or O_TMPFILE and mode has S_ISUID or S_ISGID";
  }
  return "";
}

scmp_arg_cmp cmp(unsigned arg, scmp_compare op, std::uint64_t a, std::uint64_t b = 0) {
  return scmp_arg_cmp{arg, op, a, b};
}

// A 32-bit argument (the kernel reads only the low half) equal to `value`.
// MASKED_EQ with a low-half mask: libseccomp's plain EQ would also require
// the high half to be zero, which a caller can set to slip past.
scmp_arg_cmp low32_eq(unsigned arg, std::uint32_t value, std::uint32_t mask = 0xffffffff) {
  return cmp(arg, SCMP_CMP_MASKED_EQ, mask, value);
}

// Rules whose union is "arg's low 32 bits are none of `allowed`" (sorted).
// libseccomp 2.5 allows one comparison per argument in a rule, so the
// complement is cut into aligned power-of-two blocks, each one masked
// comparison (the way a CIDR list covers an address range).
template <typename Values>
std::vector<std::vector<scmp_arg_cmp>> low32_not_in(unsigned arg, const Values& allowed) {
  std::vector<std::vector<scmp_arg_cmp>> rules;
  auto cover = [&](std::uint64_t lo, std::uint64_t hi) {  // inclusive, within 32 bits
    while (lo <= hi) {
      std::uint64_t size = lo == 0 ? (std::uint64_t{1} << 32) : (lo & (~lo + 1));
      while (lo + size - 1 > hi) size >>= 1;
      rules.push_back({low32_eq(arg, static_cast<std::uint32_t>(lo),
                                static_cast<std::uint32_t>(~(size - 1)))});
      lo += size;
    }
  };
  std::uint64_t next = 0;
  for (std::uint32_t a : allowed) {
    if (a > next) cover(next, std::uint64_t{a} - 1);
    next = std::uint64_t{a} + 1;
  }
  if (next <= 0xffffffff) cover(next, 0xffffffff);
  return rules;
}

// The rules of one row; the filter denies when any rule matches, and a
// rule matches when all its comparisons do.
std::vector<std::vector<scmp_arg_cmp>> rules_for(When when) {
  switch (when) {
    case When::always: return {{}};
    case When::clone_new_namespace: {
      std::vector<std::vector<scmp_arg_cmp>> rules;
      for (auto flag : kCloneNewFlags) rules.push_back({cmp(0, SCMP_CMP_MASKED_EQ, flag, flag)});
      return rules;
    }
    case When::personality_change:
      return low32_not_in(0, kSafePersonas);
    case When::socket_not_unix:
      // All 64 bits compared: a domain with high bits set is denied too.
      return {{cmp(0, SCMP_CMP_NE, AF_UNIX)}};
    case When::socket_not_unix_inet: return low32_not_in(0, detail::kUnixInetDomains);
    case When::socket_not_host_net: return low32_not_in(0, detail::kHostNetDomains);
    case When::socket_not_unix_tcp: {
      // Denied: any domain but AF_UNIX, AF_INET, AF_INET6; and for the two
      // inet domains, a type (low 4 bits; the rest are SOCK_NONBLOCK and
      // SOCK_CLOEXEC) other than SOCK_STREAM or a protocol other than 0 or
      // IPPROTO_TCP (SOCK_STREAM also carries SCTP and MPTCP).
      auto rules = low32_not_in(0, detail::kUnixInetDomains);
      for (std::uint32_t domain : {AF_INET, AF_INET6}) {
        for (std::uint32_t type = 0; type < 16; ++type)
          if (type != SOCK_STREAM) rules.push_back({low32_eq(0, domain), low32_eq(1, type, 0xf)});
        for (auto& protocol : low32_not_in(2, detail::kTcpProtocols))
          rules.push_back({low32_eq(0, domain), protocol.front()});
      }
      return rules;
    }
    case When::tty_injection: return {{low32_eq(1, TIOCSTI)}, {low32_eq(1, TIOCLINUX)}};
    case When::set_id_mode_arg1:
    case When::set_id_mode_arg2:
    case When::set_id_open:
    case When::set_id_openat: {
      // One rule per set-id bit (and per creating flag): "bit set" is a
      // masked comparison of the low word.
      const detail::SetIdArgs args = detail::set_id_args(when);
      std::vector<std::vector<scmp_arg_cmp>> rules;
      for (std::uint32_t bit : detail::kSetIdBits) {
        if (args.flags_arg < 0) {
          rules.push_back({low32_eq(args.mode_arg, bit, bit)});
          continue;
        }
        for (std::uint32_t flag : detail::kCreateFlags)
          rules.push_back({low32_eq(static_cast<unsigned>(args.flags_arg), flag, flag), low32_eq(args.mode_arg, bit, bit)});
      }
      return rules;
    }
  }
  return {};
}

using FilterCtx = std::unique_ptr<void, decltype(&seccomp_release)>;

Error libseccomp_error(int ret, std::string_view step) {
  return Error::from_errno(-ret, "seccomp: " + std::string(step));
}

// Reads the whole of a memfd back from offset 0.
Expected<std::vector<sock_filter>> read_bpf(int fd) {
  off_t size = ::lseek(fd, 0, SEEK_END);
  if (size < 0) return Error::from_errno(errno, "seccomp: size exported BPF");
  if (size == 0 || size % sizeof(sock_filter) != 0 ||
      static_cast<std::size_t>(size) / sizeof(sock_filter) > BPF_MAXINSNS)
    return Error(EINVAL, "seccomp: exported BPF has a bad size (" + std::to_string(size) + " bytes)");
  std::vector<sock_filter> filter(static_cast<std::size_t>(size) / sizeof(sock_filter));
  auto* p = reinterpret_cast<char*>(filter.data());
  off_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, p + done, static_cast<std::size_t>(size - done), done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::from_errno(errno, "seccomp: read exported BPF");
    if (n == 0) return Error(EIO, "seccomp: exported BPF shrank while reading");
    done += n;
  }
  return filter;
}

}  // namespace

std::vector<std::string> seccomp_profiles() {
  std::vector<std::string> names;
  for (const auto& p : profiles_table()) names.emplace_back(p.name);
  return names;
}

Expected<std::vector<SeccompDenial>> seccomp_profile_denials(std::string_view profile) {
  auto found = find_profile(profile);
  if (!found) return std::move(found).error();
  std::vector<SeccompDenial> out;
  for (const auto& row : (*found)->rows)
    out.push_back({row.syscall, row.err, std::string(condition_text(row.when))});
  return out;
}

Expected<std::string> describe_seccomp_profile(std::string_view profile) {
  auto denials = seccomp_profile_denials(profile);
  if (!denials) return std::move(denials).error();
  std::vector<int> errs;
  for (const auto& d : *denials)
    if (std::find(errs.begin(), errs.end(), d.errno_value) == errs.end()) errs.push_back(d.errno_value);
  std::string out(profile);
  out += " denies";
  for (std::size_t i = 0; i < errs.size(); ++i) {
    out += i ? "; with " : " with ";
    out += strerrorname_np(errs[i]);
    out += ":";
    const char* sep = " ";
    for (const auto& d : *denials) {
      if (d.errno_value != errs[i]) continue;
      out += sep + d.syscall;
      if (!d.condition.empty()) out += " (" + d.condition + ")";
      sep = ", ";
    }
  }
  return out;
}

SeccompSpec& SeccompSpec::profile(std::string name) {
  profiles_.push_back(std::move(name));
  return *this;
}

SeccompSpec& SeccompSpec::notify_socket_refusals(bool on) {
  notify_socket_refusals_ = on;
  return *this;
}

SeccompProgram::SeccompProgram(SeccompProgram&& other) noexcept
    : filter_(std::move(other.filter_)),
      profiles_(std::move(other.profiles_)),
      skipped_(std::move(other.skipped_)),
      denied_(other.denied_),
      prebuilt_(other.prebuilt_),
      notifies_(other.notifies_) {
  repoint();
  other.repoint();
}

SeccompProgram& SeccompProgram::operator=(SeccompProgram&& other) noexcept {
  if (this != &other) {
    filter_ = std::move(other.filter_);
    profiles_ = std::move(other.profiles_);
    skipped_ = std::move(other.skipped_);
    denied_ = other.denied_;
    prebuilt_ = other.prebuilt_;
    notifies_ = other.notifies_;
    repoint();
    other.filter_.clear();
    other.repoint();
  }
  return *this;
}

void SeccompProgram::repoint() noexcept {
  fprog_.len = static_cast<unsigned short>(filter_.size());
  fprog_.filter = filter_.empty() ? nullptr : filter_.data();
}

std::string SeccompProgram::describe() const {
  std::string out = "seccomp:";
  for (std::size_t i = 0; i < profiles_.size(); ++i) out += (i ? ", " : " ") + profiles_[i];
  out += " (" + std::to_string(denied_) + " syscalls denied";
  if (!skipped_.empty()) {
    out += "; not on " + std::string(kArchName) + ":";
    for (std::size_t i = 0; i < skipped_.size(); ++i) out += (i ? ", " : " ") + skipped_[i];
  }
  out += "; " + std::to_string(filter_.size()) + " BPF instructions";
  if (notifies_) out += "; socket refusals answered by the supervisor";
  return out + ")";
}

namespace {

// The profiles of `spec` with repeats dropped, each checked: the key of a
// prebuilt filter and the order compile_with_libseccomp merges them in.
Expected<std::vector<std::string>> distinct_profiles(const SeccompSpec& spec) {
  if (spec.profiles().empty()) return Error::invalid("seccomp: no profile given");
  std::vector<std::string> out;
  for (const auto& name : spec.profiles()) {
    auto found = find_profile(name);
    if (!found) return std::move(found).error();
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

// Whether the kernel takes a filter returning `action`
// (SECCOMP_GET_ACTION_AVAIL, Linux 4.14; before it nothing is available).
bool kernel_has_action(std::uint32_t action) {
  return ::syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) == 0;
}

// Whether the kernel takes the actions the filters return: every filter's
// bad-arch action is KILL_PROCESS; a notifying one also returns USER_NOTIF
// (Linux 5.0, with the NEW_LISTENER flag it is installed with). Each asked
// once per process: one seccomp call for the plain filters, one more for a
// notifying one. A kernel without them gets libseccomp's own compile and
// its error.
bool kernel_takes_actions(bool notify) {
  static const bool plain_ok = kernel_has_action(SECCOMP_RET_KILL_PROCESS);
  if (!plain_ok || !notify) return plain_ok;
  static const bool notify_ok = kernel_has_action(SECCOMP_RET_USER_NOTIF);
  return notify_ok;
}

// Whether a prebuilt filter is the one this process would compile: the
// same libseccomp release (whose syscall table named the numbers) and
// native architecture (no syscall), and a kernel that takes the filter's
// actions. libseccomp's kernel API level (seccomp_api_get(): 9 probing
// seccomp calls per process) decides only whether its compile succeeds,
// which is what the actions checked here decide.
bool prebuilt_filters_apply(bool notify) {
  static const bool same = [] {
    const auto& origin = detail::builtin_seccomp_origin();
    const scmp_version* v = seccomp_version();
    return origin.major != 0 && v && v->major == origin.major && v->minor == origin.minor &&
           v->micro == origin.micro && seccomp_arch_native() == origin.arch;
  }();
  return same && kernel_takes_actions(notify);
}

std::vector<std::string> split_commas(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    auto comma = s.find(',');
    out.emplace_back(s.substr(0, comma));
    s = comma == std::string_view::npos ? std::string_view{} : s.substr(comma + 1);
  }
  return out;
}

}  // namespace

Expected<SeccompProgram> prepare(const SeccompSpec& spec) {
  auto names = distinct_profiles(spec);
  if (!names) return std::move(names).error();
  if (prebuilt_filters_apply(spec.socket_refusals_notified())) {
    std::string key;
    for (const auto& n : *names) key += (key.empty() ? "" : ",") + n;
    std::size_t count = 0;
    const detail::BuiltinSeccomp* table = detail::builtin_seccomp_table(&count);
    for (std::size_t i = 0; i < count; ++i) {
      if (key != table[i].profiles || spec.socket_refusals_notified() != table[i].notify) continue;
      SeccompProgram prog;
      prog.filter_.assign(table[i].bpf, table[i].bpf + table[i].length);
      prog.profiles_ = std::move(*names);
      prog.skipped_ = split_commas(table[i].skipped);
      prog.denied_ = table[i].denied;
      prog.prebuilt_ = true;
      prog.notifies_ = table[i].notify;
      prog.repoint();
      return prog;
    }
  }
  if (kernel_takes_actions(spec.socket_refusals_notified())) {
    auto direct = compile_seccomp_bpf(spec);
    if (direct || direct.error().code() != ENOTSUP) return direct;
  }
  return compile_with_libseccomp(spec);
}

namespace {

// The rows of `names` (checked) merged in order; a row shared by two
// profiles is taken once.
std::vector<const Row*> merged_rows(const std::vector<std::string>& names) {
  std::vector<const Row*> rows;
  std::set<std::tuple<std::string_view, int, When>> seen;
  for (const auto& name : names)
    for (const auto& row : (*find_profile(name))->rows)
      if (seen.insert({row.syscall, row.err, row.when}).second) rows.push_back(&row);
  return rows;
}

// The syscall's number on this architecture as libseccomp's table gives
// it, or -1 when it is not a syscall here (a name libseccomp knows only on
// other architectures, or not at all): there is nothing to deny, and the
// name goes once into `skipped` so the program can say so.
int resolve_or_skip(const char* syscall, std::vector<std::string>& skipped) {
  int nr = seccomp_syscall_resolve_name(syscall);
  if (nr >= 0) return nr;
  if (std::find(skipped.begin(), skipped.end(), syscall) == skipped.end()) skipped.emplace_back(syscall);
  return -1;
}

}  // namespace

Expected<SeccompProgram> compile_seccomp_bpf(const SeccompSpec& spec) {
  auto names = distinct_profiles(spec);
  if (!names) return std::move(names).error();
  SeccompProgram prog;
  prog.profiles_ = *names;
  std::vector<detail::BpfRow> rows;
  std::set<std::string_view> denied;
  for (const Row* row : merged_rows(*names)) {
    const int nr = resolve_or_skip(row->syscall, prog.skipped_);
    if (nr < 0) continue;
    const bool notify = spec.socket_refusals_notified() && row->notifiable;
    const std::uint32_t action =
        notify ? SECCOMP_RET_USER_NOTIF : SECCOMP_RET_ERRNO | (static_cast<std::uint32_t>(row->err) & SECCOMP_RET_DATA);
    rows.push_back({static_cast<std::uint32_t>(nr), row->when, action});
    denied.insert(row->syscall);
    prog.notifies_ = prog.notifies_ || notify;
  }
  prog.denied_ = denied.size();
  auto bpf = detail::emit_filter_bpf(std::move(rows));
  if (!bpf) return std::move(bpf).error();
  prog.filter_ = std::move(*bpf);
  prog.repoint();
  return prog;
}

Expected<SeccompProgram> compile_with_libseccomp(const SeccompSpec& spec) {
  auto names = distinct_profiles(spec);
  if (!names) return std::move(names).error();

  SeccompProgram prog;
  prog.profiles_ = *names;
  const std::vector<const Row*> rows = merged_rows(*names);

  // seccomp_init adds the native architecture only; a syscall arriving
  // through any other ABI meets the bad-arch action.
  FilterCtx ctx(seccomp_init(SCMP_ACT_ALLOW), &seccomp_release);
  if (!ctx) return Error(ENOMEM, "seccomp: seccomp_init failed");
  if (int r = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS))
    return libseccomp_error(r, "set bad-arch action");
  // A binary search over syscall numbers instead of a linear chain.
  if (int r = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2))
    return libseccomp_error(r, "set optimize level");

  std::set<std::string_view> denied;
  for (const Row* row : rows) {
    const int nr = resolve_or_skip(row->syscall, prog.skipped_);
    if (nr < 0) continue;
    // SCMP_ACT_NOTIFY: the caller waits until the supervisor answers from
    // the listener (it answers with row->err: the program sees the same).
    const bool notify = spec.socket_refusals_notified() && row->notifiable;
    const std::uint32_t action = notify ? SCMP_ACT_NOTIFY : SCMP_ACT_ERRNO(static_cast<std::uint16_t>(row->err));
    for (const auto& cmps : rules_for(row->when)) {
      int r = seccomp_rule_add_array(ctx.get(), action, nr, static_cast<unsigned>(cmps.size()), cmps.data());
      if (r < 0) return libseccomp_error(r, "add rule for " + std::string(row->syscall));
    }
    denied.insert(row->syscall);
    prog.notifies_ = prog.notifies_ || notify;
  }
  prog.denied_ = denied.size();

  // libseccomp 2.5 exports only to an fd: a memfd, read back whole.
  UniqueFd mem(::memfd_create("corral-seccomp-bpf", MFD_CLOEXEC));
  if (!mem) return Error::from_errno(errno, "seccomp: memfd_create");
  if (int r = seccomp_export_bpf(ctx.get(), mem.get())) return libseccomp_error(r, "export BPF");
  auto filter = read_bpf(mem.get());
  if (!filter) return std::move(filter).error();
  prog.filter_ = std::move(filter).value();
  prog.repoint();
  return prog;
}

}  // namespace corral
