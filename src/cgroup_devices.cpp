// cgroup v2's device controller: there is no devices.allow file, only a
// BPF_PROG_TYPE_CGROUP_DEVICE program attached to the group (kernel 4.15,
// Documentation/admin-guide/cgroup-v2.rst "Device controller"). The kernel
// runs it at open(2) and mknod(2) of a device node by a task of the group
// (and its descendants) with a struct bpf_cgroup_dev_ctx; 1 allows, 0
// refuses with EPERM. Parent-side: we build the few instructions by hand (a
// compare chain, no maps, no libbpf), load and attach them.
#include <linux/bpf.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "cgroup_backend.hpp"
#include "corral/syscalls.hpp"

namespace corral::detail {
namespace {

bpf_insn insn(std::uint8_t code, std::uint8_t dst, std::uint8_t src, std::int16_t off, std::int32_t imm) {
  bpf_insn i;
  std::memset(&i, 0, sizeof i);
  i.code = code;
  i.dst_reg = dst & 0xf;
  i.src_reg = src & 0xf;
  i.off = off;
  i.imm = imm;
  return i;
}

// r_dst = *(u32 *)(r1 + off)
bpf_insn load_ctx(std::uint8_t dst, std::int16_t off) { return insn(BPF_LDX | BPF_W | BPF_MEM, dst, BPF_REG_1, off, 0); }
// if r_dst != imm goto +skip
bpf_insn jne(std::uint8_t dst, std::int32_t imm, std::int16_t skip) {
  return insn(BPF_JMP | BPF_JNE | BPF_K, dst, 0, skip, imm);
}
bpf_insn mov_r0(std::int32_t imm) { return insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, imm); }
bpf_insn exit_insn() { return insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0); }

}  // namespace

// The program: r2 = device type (access_type & 0xffff), r3 = major, r4 =
// minor; for each rule "if type, major (and minor unless every minor)
// match: return 1"; at the end "return 0". Every access (read, write,
// mknod) of a listed device is allowed, as v1's "rwm".
std::vector<bpf_insn> device_program(const std::vector<DeviceRule>& rules) {
  std::vector<bpf_insn> p;
  p.push_back(load_ctx(BPF_REG_2, offsetof(bpf_cgroup_dev_ctx, access_type)));
  p.push_back(insn(BPF_ALU | BPF_AND | BPF_K, BPF_REG_2, 0, 0, 0xffff));
  p.push_back(load_ctx(BPF_REG_3, offsetof(bpf_cgroup_dev_ctx, major)));
  p.push_back(load_ctx(BPF_REG_4, offsetof(bpf_cgroup_dev_ctx, minor)));
  for (const auto& r : rules) {
    const bool any_minor = r.minor < 0;
    // The jumps skip the rest of this rule's block: the remaining compares
    // and the two "return 1" instructions.
    const std::int16_t block = any_minor ? 4 : 5;
    const std::int32_t type = r.type == 'b' ? BPF_DEVCG_DEV_BLOCK : BPF_DEVCG_DEV_CHAR;
    p.push_back(jne(BPF_REG_2, type, static_cast<std::int16_t>(block - 1)));
    p.push_back(jne(BPF_REG_3, static_cast<std::int32_t>(r.major), static_cast<std::int16_t>(block - 2)));
    if (!any_minor) p.push_back(jne(BPF_REG_4, r.minor, 2));
    p.push_back(mov_r0(1));
    p.push_back(exit_insn());
  }
  p.push_back(mov_r0(0));
  p.push_back(exit_insn());
  return p;
}

Expected<UniqueFd> attach_device_program(int cgroup_dir_fd, const std::vector<DeviceRule>& rules) {
  std::vector<bpf_insn> prog = device_program(rules);
  static const char kLicense[] = "GPL";
  union bpf_attr load;
  std::memset(&load, 0, sizeof load);
  load.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  load.insns = reinterpret_cast<std::uint64_t>(prog.data());
  load.insn_cnt = static_cast<std::uint32_t>(prog.size());
  load.license = reinterpret_cast<std::uint64_t>(kLicense);
  long fd = sys::call(SYS_bpf, BPF_PROG_LOAD, reinterpret_cast<long>(&load), sizeof load);
  if (fd < 0) return Error::from_errno(sys::error_of(fd), "cgroup v2: bpf(BPF_PROG_LOAD) of the device program");
  UniqueFd prog_fd(static_cast<int>(fd));
  union bpf_attr attach;
  std::memset(&attach, 0, sizeof attach);
  attach.target_fd = static_cast<std::uint32_t>(cgroup_dir_fd);
  attach.attach_bpf_fd = static_cast<std::uint32_t>(prog_fd.get());
  attach.attach_type = BPF_CGROUP_DEVICE;
  // BPF_F_ALLOW_MULTI: an ancestor's device program (systemd's, a
  // container runtime's) still runs too; both must allow an access.
  attach.attach_flags = BPF_F_ALLOW_MULTI;
  long ret = sys::call(SYS_bpf, BPF_PROG_ATTACH, reinterpret_cast<long>(&attach), sizeof attach);
  if (ret < 0)
    return Error::from_errno(sys::error_of(ret), "cgroup v2: bpf(BPF_PROG_ATTACH, BPF_CGROUP_DEVICE) to the run group");
  return prog_fd;
}

}  // namespace corral::detail
