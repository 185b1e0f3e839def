#include "corral/sha256.hpp"

#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

namespace corral {

// OpenSSL's SHA256_* functions, not EVP: in OpenSSL 3 the first EVP digest
// initialises the library (config file, provider and name tables), which
// cost ~0.9 ms per process, a fifth of a one-run `corral run`. The
// low-level functions run the same assembly on a plain struct and touch no
// global state. They are marked deprecated in 3.0, hence the define.
struct Sha256::Ctx {
  SHA256_CTX c;
  bool ok = SHA256_Init(&c) == 1;
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {}
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;
Sha256::~Sha256() = default;

void Sha256::update(std::span<const std::byte> data) {
  if (!ctx_ || !ctx_->ok || data.empty()) return;
  SHA256_Update(&ctx_->c, data.data(), data.size());
}

std::string Sha256::hex_digest() const {
  if (!ctx_ || !ctx_->ok) return "";
  // Finalise a copy so the stream can go on (sha256_hex() mid-run).
  SHA256_CTX copy = ctx_->c;
  unsigned char digest[SHA256_DIGEST_LENGTH];
  if (SHA256_Final(digest, &copy) != 1) return "";
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(sizeof digest * 2, '0');
  for (std::size_t i = 0; i < sizeof digest; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return out;
}

std::string Sha256::hex_of(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.hex_digest();
}

}  // namespace corral
