// corral's own BPF for the seccomp profiles (seccomp_bpf.hpp says why).
// Parent side only. The shape, for x86_64:
//
//   arch != x86_64                          -> KILL_PROCESS
//   nr >= 0x40000000 (x32) and nr != -1     -> KILL_PROCESS   (libseccomp's)
//   binary search over the syscall number: ranges of numbers with the same
//   outcome (a run of neighbours all denied with EPERM is one range), each
//   leaf a return or a row's argument check, which returns the row's
//   action or ALLOW.
//
// A classic BPF conditional jump reaches at most 255 instructions ahead;
// the filters here are far shorter (about a hundred), and a longer one is
// refused with ENOTSUP rather than emitted wrong.
#include "seccomp_bpf.hpp"

#include <linux/audit.h>
#include <linux/seccomp.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>

namespace corral::detail {
namespace {

// Offsets into struct seccomp_data (little-endian: an argument's low word
// first).
constexpr std::uint32_t kNrOffset = 0;
constexpr std::uint32_t kArchOffset = 4;
constexpr std::uint32_t arg_low(unsigned i) { return 16 + 8 * i; }
constexpr std::uint32_t arg_high(unsigned i) { return 20 + 8 * i; }

constexpr std::uint32_t kX32Bit = 0x40000000;

// A program with symbolic jump targets, laid out once complete.
class Assembler {
 public:
  using Label = std::size_t;

  Label label() {
    at_.push_back(kUnplaced);
    alias_.push_back(at_.size() - 1);
    return at_.size() - 1;
  }
  // `l` is wherever `target` is.
  void alias(Label l, Label target) { alias_[l] = target; }
  void place(Label l) { at_[l] = code_.size(); }
  Label here() {
    Label l = label();
    place(l);
    return l;
  }

  void load(std::uint32_t offset) { emit(BPF_LD | BPF_W | BPF_ABS, offset); }
  void and_k(std::uint32_t k) { emit(BPF_ALU | BPF_AND | BPF_K, k); }
  void ret(std::uint32_t action) { emit(BPF_RET | BPF_K, action); }
  // if (A <op> k) goto yes; else goto no.
  void jump(std::uint16_t op, std::uint32_t k, Label yes, Label no) {
    code_.push_back(Insn{static_cast<std::uint16_t>(BPF_JMP | op | BPF_K), k, yes, no, true});
  }

  // The return of `action`, shared by every leaf that returns it.
  Label returning(std::uint32_t action) {
    auto [it, added] = returns_.try_emplace(action, 0);
    if (added) it->second = label();
    return it->second;
  }

  Expected<std::vector<sock_filter>> finish() {
    for (const auto& [action, l] : returns_) {
      place(l);
      ret(action);
    }
    std::vector<sock_filter> out;
    out.reserve(code_.size());
    for (std::size_t i = 0; i < code_.size(); ++i) {
      const Insn& in = code_[i];
      sock_filter f{in.code, 0, 0, in.k};
      if (in.is_jump) {
        for (auto [target, slot] : {std::pair{in.yes, &f.jt}, std::pair{in.no, &f.jf}}) {
          const std::size_t to = resolve(target);
          if (to == kUnplaced || to <= i) return Error(EINVAL, "seccomp: emitter: a jump to an unplaced or earlier label");
          if (to - i - 1 > 255) return Error(ENOTSUP, "seccomp: emitter: a jump farther than 255 instructions");
          *slot = static_cast<std::uint8_t>(to - i - 1);
        }
      }
      out.push_back(f);
    }
    if (out.size() > BPF_MAXINSNS) return Error(ENOTSUP, "seccomp: emitter: filter longer than BPF_MAXINSNS");
    return out;
  }

 private:
  static constexpr std::size_t kUnplaced = static_cast<std::size_t>(-1);
  struct Insn {
    std::uint16_t code;
    std::uint32_t k;
    Label yes = 0, no = 0;
    bool is_jump = false;
  };
  void emit(std::uint16_t code, std::uint32_t k) { code_.push_back(Insn{code, k, 0, 0, false}); }
  std::size_t resolve(Label l) const {
    for (std::size_t hops = 0; alias_[l] != l && hops < alias_.size(); ++hops) l = alias_[l];
    return alias_[l] == l ? at_[l] : kUnplaced;
  }

  std::vector<Insn> code_;
  std::vector<std::size_t> at_;
  std::vector<Label> alias_;
  std::map<std::uint32_t, Label> returns_;
};

using Label = Assembler::Label;

// The low 32 bits of argument `arg` (already loaded into A) among `allowed`:
// ALLOW, else `deny`.
template <std::size_t N>
void allow_values(Assembler& a, const std::uint32_t (&allowed)[N], Label allow, Label deny) {
  for (std::size_t i = 0; i < N; ++i) {
    Label next = i + 1 == N ? deny : a.label();
    a.jump(BPF_JEQ, allowed[i], allow, next);
    if (i + 1 != N) a.place(next);
  }
}

// A row's argument check at the current position: ends in ALLOW or `deny`.
// Each is what seccomp.cpp's rules_for says through libseccomp.
void emit_condition(Assembler& a, When when, Label allow, Label deny) {
  switch (when) {
    case When::always:
      break;  // a return, never a block (see leaf_target)
    case When::clone_new_namespace: {
      // Any CLONE_NEW* bit (each rule is "flags & bit == bit" on a bit of
      // the low word; the high word is masked out).
      std::uint32_t mask = 0;
      for (auto flag : kCloneNewFlags) mask |= static_cast<std::uint32_t>(flag);
      a.load(arg_low(0));
      a.jump(BPF_JSET, mask, deny, allow);
      break;
    }
    case When::personality_change:
      a.load(arg_low(0));
      allow_values(a, kSafePersonas, allow, deny);
      break;
    case When::socket_not_unix: {
      // All 64 bits: AF_UNIX with anything in the high word is denied.
      Label low = a.label();
      a.load(arg_high(0));
      a.jump(BPF_JEQ, 0, low, deny);
      a.place(low);
      a.load(arg_low(0));
      a.jump(BPF_JEQ, AF_UNIX, allow, deny);
      break;
    }
    case When::socket_not_unix_inet:
      a.load(arg_low(0));
      allow_values(a, kUnixInetDomains, allow, deny);
      break;
    case When::socket_not_host_net:
      a.load(arg_low(0));
      allow_values(a, kHostNetDomains, allow, deny);
      break;
    case When::socket_not_unix_tcp: {
      // AF_UNIX; or AF_INET/AF_INET6 with type (low 4 bits) SOCK_STREAM
      // and protocol 0 or IPPROTO_TCP.
      Label inet = a.label(), inet6 = a.label(), protocol = a.label();
      a.load(arg_low(0));
      a.jump(BPF_JEQ, AF_UNIX, allow, inet);
      a.place(inet);
      Label tcp = a.label();
      a.jump(BPF_JEQ, AF_INET, tcp, inet6);
      a.place(inet6);
      a.jump(BPF_JEQ, AF_INET6, tcp, deny);
      a.place(tcp);
      a.load(arg_low(1));
      a.and_k(0xf);
      a.jump(BPF_JEQ, SOCK_STREAM, protocol, deny);
      a.place(protocol);
      a.load(arg_low(2));
      allow_values(a, kTcpProtocols, allow, deny);
      break;
    }
    case When::tty_injection: {
      Label second = a.label();
      a.load(arg_low(1));
      a.jump(BPF_JEQ, TIOCSTI, deny, second);
      a.place(second);
      a.jump(BPF_JEQ, TIOCLINUX, deny, allow);
      break;
    }
    case When::set_id_mode_arg1:
    case When::set_id_mode_arg2:
    case When::set_id_open:
    case When::set_id_openat: {
      const SetIdArgs args = set_id_args(when);
      if (args.flags_arg >= 0) {
        std::uint32_t create = 0;
        for (auto f : kCreateFlags) create |= f;
        Label mode = a.label();
        a.load(arg_low(static_cast<unsigned>(args.flags_arg)));
        a.jump(BPF_JSET, create, mode, allow);
        a.place(mode);
      }
      std::uint32_t set_id = 0;
      for (auto b : kSetIdBits) set_id |= b;
      a.load(arg_low(args.mode_arg));
      a.jump(BPF_JSET, set_id, deny, allow);
      break;
    }
  }
}

// A range of syscall numbers [first, last] with one outcome: allowed
// (row == nullptr) or a row's.
struct Range {
  std::uint32_t first, last;
  const BpfRow* row;
};

// Neighbours with the same condition and action share a range (mkdirat
// and mknodat; chmod and fchmod): the leaf reads only the row's condition
// and action, never its number.
bool same_outcome(const BpfRow* a, const BpfRow* b) {
  if (a == nullptr || b == nullptr) return a == b;
  return a->when == b->when && a->action == b->action;
}

}  // namespace

Expected<std::vector<sock_filter>> emit_filter_bpf(std::vector<BpfRow> rows) {
#if !defined(__x86_64__)
  (void)rows;
  return Error(ENOTSUP, "seccomp: emitter: x86_64 only");
#else
  std::sort(rows.begin(), rows.end(), [](const BpfRow& a, const BpfRow& b) { return a.nr < b.nr; });
  for (std::size_t i = 1; i < rows.size(); ++i)
    if (rows[i].nr == rows[i - 1].nr) return Error(ENOTSUP, "seccomp: emitter: two rows for one syscall");
  for (const auto& r : rows)
    if (r.nr >= kX32Bit) return Error(EINVAL, "seccomp: emitter: syscall number " + std::to_string(r.nr));

  // [0, 0xffffffff] cut into ranges of one outcome.
  std::vector<Range> ranges;
  auto add = [&](std::uint32_t first, std::uint32_t last, const BpfRow* row) {
    if (!ranges.empty() && same_outcome(ranges.back().row, row) && ranges.back().last + 1 == first)
      ranges.back().last = last;
    else
      ranges.push_back({first, last, row});
  };
  std::uint32_t next = 0;
  for (const auto& r : rows) {
    if (r.nr > next) add(next, r.nr - 1, nullptr);
    add(r.nr, r.nr, &r);
    next = r.nr + 1;
  }
  add(next, 0xffffffff, nullptr);

  Assembler a;
  const Label kill = a.returning(SECCOMP_RET_KILL_PROCESS);
  const Label allow = a.returning(SECCOMP_RET_ALLOW);
  // The architecture, then libseccomp's x32 check: a number with the x32
  // bit is another ABI (killed), except -1, which goes on as a number.
  Label native = a.label(), x32 = a.label(), search = a.label();
  a.load(kArchOffset);
  a.jump(BPF_JEQ, AUDIT_ARCH_X86_64, native, kill);
  a.place(native);
  a.load(kNrOffset);
  a.jump(BPF_JGE, kX32Bit, x32, search);
  a.place(x32);
  a.jump(BPF_JEQ, 0xffffffff, search, kill);

  // Leaves: a return for "always" and allowed ranges, a block (emitted
  // after the search) for a row with an argument check, one per condition
  // and action (the set-id mode check serves five syscalls).
  std::vector<std::pair<Label, const BpfRow*>> blocks;
  std::map<std::pair<When, std::uint32_t>, Label> block_of;
  auto leaf_target = [&](const Range& r) -> Label {
    if (r.row == nullptr) return allow;
    if (r.row->when == When::always) return a.returning(r.row->action);
    auto [it, added] = block_of.try_emplace({r.row->when, r.row->action}, 0);
    if (added) {
      it->second = a.label();
      blocks.emplace_back(it->second, r.row);
    }
    return it->second;
  };
  // The search over ranges[lo..hi]: "nr >= first of the upper half"
  // splits it; a single range is its leaf. Returns where it starts.
  auto search_ranges = [&](auto& self, std::size_t lo, std::size_t hi) -> Label {
    if (lo == hi) return leaf_target(ranges[lo]);
    const std::size_t mid = lo + (hi - lo + 1) / 2;
    Label me = a.here();
    // Placeholders, patched below once the halves have their labels.
    Label upper = a.label(), lower = a.label();
    a.jump(BPF_JGE, ranges[mid].first, upper, lower);
    Label lower_at = self(self, lo, mid - 1);
    Label upper_at = self(self, mid, hi);
    a.alias(upper, upper_at);
    a.alias(lower, lower_at);
    return me;
  };
  a.alias(search, search_ranges(search_ranges, 0, ranges.size() - 1));
  for (const auto& [l, row] : blocks) {
    a.place(l);
    emit_condition(a, row->when, allow, a.returning(row->action));
  }
  return a.finish();
#endif
}

}  // namespace corral::detail
