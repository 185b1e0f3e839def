// SHA-256 of a byte stream, for the digests a Result reports (captured
// output, artifacts) and for names derived from content (namespace
// templates). A module of its own below every layer that hashes, so a
// mechanism that needs a digest does not include the run layer's capture.
//
// Parent-side: allocates; not for the child between clone and exec.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace corral {

// Incremental SHA-256 (OpenSSL's libcrypto). Movable, not copyable.
class Sha256 {
 public:
  Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  ~Sha256();

  void update(std::span<const std::byte> data);
  void update(std::string_view data) { update(std::as_bytes(std::span(data.data(), data.size()))); }
  // 64 lowercase hex digits of everything fed so far. Does not end the
  // stream: it finalises a copy, so update() may go on afterwards.
  // Returns "" only if libcrypto failed, never throws.
  std::string hex_digest() const;

  // One-shot convenience.
  static std::string hex_of(std::string_view data);

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

}  // namespace corral
