#include "corral/sha256.hpp"

#include <immintrin.h>
#include <sys/platform/x86.h>

#include <cstdint>
#include <cstring>

namespace corral {

// SHA-256 (FIPS 180-4) of our own, not libcrypto's: linking libcrypto's
// SHA-256 brings its start-up CPU probe (OPENSSL_cpuid_setup, run from
// .init in every process of the static CLI, whether it hashes or not),
// about ten CPUID instructions that each trap to the hypervisor on a VM.
// The blocks go through the x86 SHA extensions where the CPU has them
// (as libcrypto's did: ~2 GB/s), else through the portable rounds below.
// glibc's CPU feature table says which, read without a CPUID of ours.
namespace {

constexpr std::uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::uint32_t kInit[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

inline std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

inline std::uint32_t load_be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

void blocks_portable(std::uint32_t h[8], const unsigned char* data, std::size_t n) {
  for (; n > 0; --n, data += 64) {
    std::uint32_t w[64];
    for (int t = 0; t < 16; ++t) w[t] = load_be32(data + 4 * t);
    for (int t = 16; t < 64; ++t) {
      std::uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      std::uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int t = 0; t < 64; ++t) {
      std::uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[t] + w[t];
      std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      k = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
  }
}

// The SHA extensions: sha256rnds2 does two rounds on the state split as
// ABEF/CDGH; sha256msg1/msg2 extend the message schedule four words at a
// time. m[g % 4] holds words 4g..4g+3 of the schedule.
__attribute__((target("sha,sse4.1,ssse3"))) void blocks_shani(std::uint32_t h[8], const unsigned char* data,
                                                               std::size_t n) {
  const __m128i kBswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&h[0]));  // DCBA
  __m128i st1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&h[4]));  // HGFE
  tmp = _mm_shuffle_epi32(tmp, 0xB1);                                      // CDAB
  st1 = _mm_shuffle_epi32(st1, 0x1B);                                      // EFGH
  __m128i st0 = _mm_alignr_epi8(tmp, st1, 8);                              // ABEF
  st1 = _mm_blend_epi16(st1, tmp, 0xF0);                                   // CDGH
  for (; n > 0; --n, data += 64) {
    const __m128i abef = st0, cdgh = st1;
    __m128i m[4];
    for (int g = 0; g < 16; ++g) {
      __m128i& cur = m[g % 4];
      if (g < 4) {
        cur = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 16 * g)), kBswap);
      } else {
        // W[t] = W[t-16] + s0(W[t-15]) + W[t-7] + s1(W[t-2]), four at once.
        __m128i x = _mm_sha256msg1_epu32(cur, m[(g + 1) % 4]);
        x = _mm_add_epi32(x, _mm_alignr_epi8(m[(g + 3) % 4], m[(g + 2) % 4], 4));
        cur = _mm_sha256msg2_epu32(x, m[(g + 3) % 4]);
      }
      __m128i msg = _mm_add_epi32(cur, _mm_loadu_si128(reinterpret_cast<const __m128i*>(&kK[4 * g])));
      st1 = _mm_sha256rnds2_epu32(st1, st0, msg);
      msg = _mm_shuffle_epi32(msg, 0x0E);
      st0 = _mm_sha256rnds2_epu32(st0, st1, msg);
    }
    st0 = _mm_add_epi32(st0, abef);
    st1 = _mm_add_epi32(st1, cdgh);
  }
  tmp = _mm_shuffle_epi32(st0, 0x1B);     // FEBA
  st1 = _mm_shuffle_epi32(st1, 0xB1);     // DCHG
  st0 = _mm_blend_epi16(tmp, st1, 0xF0);  // DCBA
  st1 = _mm_alignr_epi8(st1, tmp, 8);     // HGFE
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&h[0]), st0);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&h[4]), st1);
}

using BlockFn = void (*)(std::uint32_t*, const unsigned char*, std::size_t);

BlockFn block_function() {
  static const BlockFn fn = CPU_FEATURE_ACTIVE(SHA) && CPU_FEATURE_ACTIVE(SSE4_1) && CPU_FEATURE_ACTIVE(SSSE3)
                                ? blocks_shani
                                : blocks_portable;
  return fn;
}

}  // namespace

struct Sha256::Ctx {
  std::uint32_t h[8];
  std::uint64_t bytes = 0;   // fed so far
  unsigned char tail[64];    // a partial block
  std::size_t tail_len = 0;
  Ctx() { std::memcpy(h, kInit, sizeof h); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {}
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;
Sha256::~Sha256() = default;

void Sha256::update(std::span<const std::byte> data) {
  if (!ctx_ || data.empty()) return;
  Ctx& c = *ctx_;
  const BlockFn blocks = block_function();
  auto p = reinterpret_cast<const unsigned char*>(data.data());
  std::size_t n = data.size();
  c.bytes += n;
  if (c.tail_len > 0) {
    std::size_t take = std::min(n, sizeof c.tail - c.tail_len);
    std::memcpy(c.tail + c.tail_len, p, take);
    c.tail_len += take, p += take, n -= take;
    if (c.tail_len < sizeof c.tail) return;
    blocks(c.h, c.tail, 1);
    c.tail_len = 0;
  }
  if (n >= 64) {
    blocks(c.h, p, n / 64);
    p += n / 64 * 64, n %= 64;
  }
  std::memcpy(c.tail, p, n);
  c.tail_len = n;
}

std::string Sha256::hex_digest() const {
  if (!ctx_) return "";
  // Finalise a copy so the stream can go on (sha256_hex() mid-run).
  Ctx c = *ctx_;
  unsigned char pad[128] = {0x80};
  std::size_t pad_len = (c.tail_len < 56 ? 56 : 120) - c.tail_len;
  const std::uint64_t bits = c.bytes * 8;
  for (int i = 0; i < 8; ++i) pad[pad_len + i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
  std::memcpy(c.tail + c.tail_len, pad, std::min(pad_len + 8, sizeof c.tail - c.tail_len));
  const BlockFn blocks = block_function();
  blocks(c.h, c.tail, 1);
  if (pad_len + 8 > sizeof c.tail - c.tail_len) blocks(c.h, pad + (sizeof c.tail - c.tail_len), 1);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(64, '0');
  for (int i = 0; i < 32; ++i) {
    unsigned b = (c.h[i / 4] >> (24 - 8 * (i % 4))) & 0xff;
    out[2 * i] = kHex[b >> 4];
    out[2 * i + 1] = kHex[b & 0xf];
  }
  return out;
}

std::string Sha256::hex_of(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.hex_digest();
}

}  // namespace corral
