// The static CLI's start-up: six things a static start does dearly on a
// VM, done cheaply. All only in the static link (Makefile: CLI_LINK),
// but for the layout of 5., which the dynamic (sanitizer) link keeps too.
//
// 1. The ELF entry (-Wl,-e,corral_cli_entry): make the binary's writable
// pages, and map its hot code (5.), in a few madvise calls, then glibc's
// _start as usual.
//
// The static PIE's self-relocation writes every page of .data.rel.ro
// (vtables, tables of pointers) and .got: one copy-on-write fault each,
// ~20 for a one-run `corral run`. MADV_POPULATE_WRITE (Linux 5.14) makes the
// private copies of those pages, and the zero pages of .bss, in one call
// before _dl_relocate_static_pie, so its writes find their pages made. On
// an older kernel the call fails (EINVAL) and the pages fault in as before.
//
// 5. The code a one-run `corral run` executes, packed and mapped in one
// call. Left to the linker that code was scattered over all 4 MiB of text:
// ~45 read faults a run, each mapping the 64 KiB around it, and 236 pages
// touched for ~33,000 distinct instructions. src/cli/hot_text.ld (written
// by scripts/hot-text from a single-step trace of such runs) gathers the
// functions they execute (-ffunction-sections), in the order they first
// run, into one range, .text.corral_hot (~1.1 MiB for tiers none, process
// and container; 134 pages touched in tier none); MADV_POPULATE_READ maps
// it before glibc starts. Touched pages count even when mapped: with
// shadow page tables (this host, a PVM guest) a process's first touch of a
// mapped page is a hypervisor exit, ~5 us. Measured here: 45 faults 559 us,
// mapping 1,024 cached pages in one call 109 us; `corral run --tier none
// -- /bin/true` went from 74 page faults to 30, and from 7.6 to 6.7 ms a
// run. All of the text is not mapped: on a Firecracker VM mapping the whole
// 4 MiB cost more than the faults it saved (oneshot_none 3.07-3.34x bare
// with it, 2.60-3.07x without). A stale list costs only speed: code it
// misses faults in where it lies.
//
// 6. The heap next to the rest of the process. A static PIE's break starts
// at a random address of its own, far from every other mapping (0x5555...
// against 0x7f...), so the first write there (glibc's TLS block, in
// __libc_setup_tls) needs page tables of its own at three levels. With
// shadow page tables that write took 68-700 us here (perf: the gap after
// its fault). A PROT_NONE page at the break makes brk fail, and glibc then
// takes its TLS block and its main arena (1 MiB at a time) from mmap,
// beside the binary and the process's other mappings. Measured A/B, loops
// of 100 runs: tier none 0.96, tier process 0.94 of the time. The price:
// free memory at the top of the main arena is never handed back by sbrk
// (a long `corral batch` keeps its peak heap mapped), and the heap's
// address follows the mmap base, not a random break of its own.
//
// Runs before glibc is set up: no TLS (so no stack protector), no errno,
// nothing relocated. It reads only the ELF header through __ehdr_start, a
// hidden symbol the linker defines (one PC-relative lea, no relocation),
// and takes the address of corral_relro_pad (4. below) the same way. The
// pad is left out of the data call: its pages are never touched.
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <sys/platform/x86.h>

#include <cstddef>
#include <cstdint>

#include "corral/syscalls.hpp"

extern "C" {
extern const ElfW(Ehdr) __ehdr_start __attribute__((visibility("hidden")));
// The bounds of the hot code (5. above), defined by src/cli/hot_text.ld.
extern const char corral_hot_text_start[] __attribute__((visibility("hidden")));
extern const char corral_hot_text_end[] __attribute__((visibility("hidden")));
void corral_cli_prefault() __attribute__((visibility("hidden")));
}

// 4. One TLB flush, not one per page, when glibc makes RELRO read-only.
// After the self-relocation, _dl_relocate_static_pie mprotects PT_GNU_RELRO
// (.data.rel.ro, .got: 17 pages, all present once relocated) to PROT_READ.
// The kernel then flushes the TLB for the range of PTEs it changed: up to
// tlb_single_page_flush_ceiling (33) pages one INVLPG a page, past it the
// whole TLB at once. Here each INVLPG traps to the hypervisor: that
// mprotect took 255-357 us of a one-run `corral run` (perf trace), and a
// throwaway program measured 17 present pages at 67-335 us against 39-84 us
// for 34 or more. This pad stretches RELRO past 33 pages: the changed range
// runs from its first present page (.tdata) to its last (.got), so the
// mprotect flushes once. The pad itself is never touched, so never present:
// the entry's MADV_POPULATE_WRITE skips it, and it costs the process no
// memory, only 132 KiB of zeros in the file. RELRO keeps all it protected.
extern "C" {
constexpr std::size_t kRelroPadBytes = 33 * 4096;
__attribute__((section(".data.rel.ro.corral_relro_pad"), aligned(4096), used, visibility("hidden")))
char corral_relro_pad[kRelroPadBytes] = {};
}

namespace {

constexpr int kPopulateRead = 22;   // MADV_POPULATE_READ (Linux 5.14; glibc 2.36's header lacks it)
constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE
constexpr std::uintptr_t kPage = 4096;
constexpr std::uintptr_t kStackPrefault = 32 * 1024;

// sys::call touches no errno and no TLS, and has no array for a stack
// protector to guard: safe before glibc, inlined or not.
__attribute__((always_inline)) inline void raw_madvise(std::uintptr_t start, std::uintptr_t end, int advice) {
  start &= ~(kPage - 1);
  end = (end + kPage - 1) & ~(kPage - 1);
  // Best effort: a kernel without it faults the pages in as before.
  (void)corral::sys::call(SYS_madvise, static_cast<long>(start), static_cast<long>(end - start), advice);
}

}  // namespace

extern "C" __attribute__((no_stack_protector, no_sanitize("address", "undefined"), used)) void
corral_cli_prefault() {
  const auto* ehdr = &__ehdr_start;
  const auto* phdr = reinterpret_cast<const ElfW(Phdr)*>(reinterpret_cast<const char*>(ehdr) + ehdr->e_phoff);
  // The load bias: where the segment that holds the ELF header landed, less
  // its link-time address (0 for a PIE).
  std::uintptr_t bias = reinterpret_cast<std::uintptr_t>(ehdr);
  for (int i = 0; i < ehdr->e_phnum; ++i)
    if (phdr[i].p_type == PT_LOAD && phdr[i].p_offset == 0) bias -= phdr[i].p_vaddr;
  for (int i = 0; i < ehdr->e_phnum; ++i) {
    const ElfW(Phdr)& ph = phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const std::uintptr_t start = bias + ph.p_vaddr;
    const std::uintptr_t end = start + ph.p_memsz;
    if (ph.p_flags & PF_W) {
      // Around the pad (page-aligned, inside this segment): two calls.
      const auto pad = reinterpret_cast<std::uintptr_t>(corral_relro_pad);
      if (pad >= start && pad + kRelroPadBytes <= end) {
        raw_madvise(start, pad, kPopulateWrite);
        raw_madvise(pad + kRelroPadBytes, end, kPopulateWrite);
      } else {
        raw_madvise(start, end, kPopulateWrite);
      }
    }
  }
  // 6. The heap next to the rest: brk fails from here on.
  const long brk = corral::sys::call(SYS_brk, 0);
  if (brk > 0)
    (void)corral::sys::call(SYS_mmap, brk, kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  // 5. The hot code, in one call: mapped before it runs.
  const auto hot_start = reinterpret_cast<std::uintptr_t>(corral_hot_text_start);
  const auto hot_end = reinterpret_cast<std::uintptr_t>(corral_hot_text_end);
  if (hot_end > hot_start) raw_madvise(hot_start, hot_end, kPopulateRead);
  // The stack a one-run `corral run` reaches (~12 KiB below this frame;
  // 5 faults) is inside the 128 KiB the kernel's stack mapping starts with.
  const auto sp = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  raw_madvise(sp - kStackPrefault, sp, kPopulateWrite);
}

// The ELF entry: the kernel's stack (argc, argv, envp, auxv at %rsp) and
// %rdx (an exit hook, 0 from the kernel) go to _start untouched; %r12 and
// %r13 are callee-saved, so the call keeps them.
asm(R"(
  .text
  .globl corral_cli_entry
  .hidden corral_cli_entry
  .type corral_cli_entry, @function
corral_cli_entry:
  .cfi_startproc
  .cfi_undefined rip
  mov %rsp, %r12
  mov %rdx, %r13
  and $-16, %rsp
  call corral_cli_prefault
  mov %r12, %rsp
  mov %r13, %rdx
  jmp _start
  .cfi_endproc
  .size corral_cli_entry, .-corral_cli_entry
)");

// 2. No readlink("/proc/self/exe") at start. glibc's static start-up
// (_dl_non_dynamic_init) asks _dl_get_origin() for the program's directory,
// kept for $ORIGIN in the paths of a later dlopen, and that is a readlink of
// /proc/self/exe: 70-100 us here, the first /proc lookup of the process.
// corral never dlopens by $ORIGIN (a static binary has no RPATH; glibc's
// NSS modules are found by name). This definition takes the place of
// glibc's (libc.a's dl-origin.o, which defines nothing else, so it is not
// linked and there is no clash) and says what glibc itself says when /proc
// is not mounted: origin unknown, (char *) -1, and a $ORIGIN path element is
// then dropped. A glibc that no longer calls it at start ignores it.
extern "C" const char* _dl_get_origin() { return reinterpret_cast<const char*>(-1); }

// 3. No CPUID of OpenSSL's. libcrypto (linked for SHA-256: sha256.cpp) runs
// OPENSSL_cpuid_setup from .init, and its OPENSSL_ia32_cpuid executes CPUID
// ~6 times: each one traps to the hypervisor (6-13 us here; the whole call
// 38 us at best). glibc has already asked the CPU, once, before .init
// runs. This definition takes the place of libcrypto's (its cpuid.o
// defines nothing else) and fills OPENSSL_ia32cap_P from glibc's answers
// with only what SHA-256's code chooses by: SHA-NI, AVX2 with BMI1/2, AVX,
// SSSE3, each only where glibc calls it active (the CPU has it and the
// kernel saves its registers), plus the x86-64 baseline (SSE, SSE2, FXSR)
// and bit 10, OpenSSL's "filled" mark. Every other bit is 0: any other
// OpenSSL code takes its generic path, which computes the same result. The
// CLI's digests are the same; the library and the tests keep libcrypto's
// own set-up. OPENSSL_ia32cap in the environment is not read.
// Weak: a sanitizer build links the CLI against libcrypto.so, which does
// not export the words (nor call this); there the address is null.
extern "C" {
extern unsigned int OPENSSL_ia32cap_P[4] __attribute__((weak));
void OPENSSL_cpuid_setup() {
  if (OPENSSL_ia32cap_P == nullptr) return;
  unsigned int cap[4] = {1u << 10 | 1u << 24 | 1u << 25 | 1u << 26, 0, 0, 0};
  if (CPU_FEATURE_ACTIVE(SSSE3)) cap[1] |= 1u << 9;
  if (CPU_FEATURE_ACTIVE(AVX)) cap[1] |= 1u << 28;
  if (CPU_FEATURE_ACTIVE(BMI1)) cap[2] |= 1u << 3;
  if (CPU_FEATURE_ACTIVE(AVX2)) cap[2] |= 1u << 5;
  if (CPU_FEATURE_ACTIVE(BMI2)) cap[2] |= 1u << 8;
  if (CPU_FEATURE_ACTIVE(SHA)) cap[2] |= 1u << 29;
  for (int i = 0; i < 4; ++i) OPENSSL_ia32cap_P[i] = cap[i];
}
}
