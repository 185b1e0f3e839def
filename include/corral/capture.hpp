// Output capture of a run: secret masking, a byte cap, a byte count and a
// SHA-256 per stream, and the lossy UTF-8 conversion used for JSON.
//
// Parent-side only. Everything here is a pure function of the bytes it is
// given: no fds, no blocking, so the io_uring supervisor calls it straight
// from a read completion. Nothing here is async-signal-safe (it allocates).
//
// Order of operations per chunk read from a child's pipe:
//   raw bytes --count--> total_bytes
//             --mask---> masked bytes (secrets become "***")
//             --hash---> SHA-256 of the whole masked stream
//             --cap----> kept buffer (at most `cap` bytes; `truncated` once any is dropped)
// The hash covers every masked byte, kept or not, so a digest never
// fingerprints a secret, and two runs whose outputs differ only past the
// cap still get different digests. total_bytes counts raw bytes as the
// child wrote them (masking changes lengths).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "corral/sha256.hpp"
#include "corral/status.hpp"

namespace corral {

// A secret's value kept in a file (SecretRef::from_file): a regular file
// (a symlink is followed: the operator named it; a fifo or device is
// refused without blocking) of at most 64 KiB, one trailing newline
// dropped; empty is an error, as an empty value cannot be masked. The
// error names the path, never the content.
Expected<std::string> read_secret_file(const std::string& path);

// The immutable part of masking: the secret values, longest first.
// Shared (read-only) between the maskers of one run's streams.
class SecretSet {
 public:
  // Empty values are ignored; duplicates are kept once.
  explicit SecretSet(std::vector<std::string> secrets);
  bool empty() const noexcept { return secrets_.empty(); }
  std::size_t longest() const noexcept { return secrets_.empty() ? 0 : secrets_.front().size(); }
  const std::vector<std::string>& values() const noexcept { return secrets_; }
  bool starts_secret(unsigned char c) const noexcept { return first_bytes_[c]; }
  // The first start p of values()[index] with from <= p and the whole
  // occurrence inside data[0, end); npos when there is none.
  std::size_t find(std::size_t index, std::string_view data, std::size_t from, std::size_t end) const noexcept;

 private:
  // Two positions of a secret whose bytes are tested at every offset of
  // the text before the whole secret is compared: chosen as the secret's
  // rarest bytes in ordinary output, so a text full of its first letter
  // (memmem's weak spot) does not slow the scan down.
  struct Probe {
    std::uint32_t at1 = 0, at2 = 0;
    unsigned char byte1 = 0, byte2 = 0;
  };
  std::vector<std::string> secrets_;  // sorted by length, longest first
  std::vector<Probe> probes_;         // one per secret
  std::array<bool, 256> first_bytes_{};
};

// Masked bytes of one chunk in two pieces, in order (SecretMasker::feed_pieces).
struct MaskedPieces {
  std::string_view head, body;
  std::size_t size() const noexcept { return head.size() + body.size(); }
  bool empty() const noexcept { return head.empty() && body.empty(); }
};

// Streaming masker for ONE stream: holds back the tail that might be the
// start of a secret continued in the next chunk. Never feed two streams
// through one masker; use fresh() to get another one with the same secrets.
//
// Semantics: every occurrence of every secret is replaced. Occurrences
// that overlap (share at least one byte) merge into a single "***", so no
// byte of any occurrence survives: secrets {"abc","bcd"} turn "xabcdy"
// into "x***y"; adjacent occurrences stay separate ("abcabc" -> "******").
// Hold-back: only a tail that is a proper prefix of some secret (at most
// longest()-1 bytes), so ordinary lines stream without delay.
class SecretMasker {
 public:
  SecretMasker();  // no secrets: pass-through
  explicit SecretMasker(std::vector<std::string> secrets);
  explicit SecretMasker(std::shared_ptr<const SecretSet> secrets);

  // A masker with the same secrets and empty stream state.
  SecretMasker fresh() const { return SecretMasker(secrets_); }
  bool has_secrets() const noexcept { return !secrets_->empty(); }

  // Masked bytes that are safe to emit now. Without secrets: the chunk unchanged.
  std::string feed(std::string_view chunk);
  // The same, appended to `out` (no allocation once `out` has capacity).
  void feed_into(std::string_view chunk, std::string& out);
  // The same again, without copying what needs no change: the masked bytes
  // as two pieces in order, `head` then `body`. `body` is a view into
  // `chunk` when the chunk holds no secret (its tail that could still
  // become one is held back, copied; the rest is not); `head` is the
  // decided end of the last chunk's held-back tail (appended to `out`,
  // shorter than the longest secret). A chunk that holds a secret is
  // masked into `out` whole (`head`, `body` empty). A chunk shorter than
  // twice the longest secret that follows a held-back tail goes into `out`
  // too.
  MaskedPieces feed_pieces(std::string_view chunk, std::string& out);
  // feed_pieces joined: `chunk` itself when nothing was held back or
  // masked; otherwise the bytes appended to `out`.
  std::string_view feed_view(std::string_view chunk, std::string& out);
  // End of stream: the held-back rest, masked. The masker is then empty
  // and could start a new stream.
  std::string finish();
  void finish_into(std::string& out);

  // Bytes currently held back (not yet returned), for tests and accounting.
  std::size_t held_back() const noexcept { return pending_.size() - pending_covered_; }

 private:
  std::size_t hold_start(std::string_view data) const;
  bool any_before(std::string_view data, std::size_t safe) const;
  std::size_t mask_until(std::string_view data, std::size_t cursor, std::size_t safe, std::string& out);
  void process(std::string_view data, bool final, std::string& out);
  MaskedPieces feed_body(std::string_view chunk, std::size_t covered, std::size_t before, std::string& out);

  std::shared_ptr<const SecretSet> secrets_;
  std::string pending_;            // raw tail not yet decided
  std::size_t pending_covered_ = 0;  // leading bytes of pending_ already inside an emitted "***"
  std::string scratch_;            // pending_ + chunk, reused
  std::vector<std::size_t> next_;  // per-secret next match, reused
};

// One output stream of a run (stdout or stderr).
class StreamCapture {
 public:
  // cap: kept bytes never exceed it (0 keeps nothing but still counts and hashes).
  explicit StreamCapture(std::uint64_t cap, SecretMasker masker = SecretMasker());

  // Raw bytes from the child's pipe. Returns the masked bytes of this
  // chunk that are final now and within the cap (for streaming callbacks:
  // they pass on what the Result keeps, never more). The view points
  // into the capture (valid until the next on_data()/finish() or a move)
  // or, when there was nothing to mask, into `raw` itself (zero copy).
  std::string_view on_data(std::string_view raw);
  // The same without joining: the two pieces of SecretMasker::feed_pieces,
  // each within the cap (for a caller that passes each on: no copy of a
  // chunk that needed no masking). Valid as on_data's view is.
  MaskedPieces on_data_pieces(std::string_view raw);
  // End of stream (EOF on the pipe): flushes the masker's tail, which is
  // also returned (within the cap). Call once.
  std::string_view finish();

  const std::string& kept() const noexcept { return kept_; }
  // The kept bytes, moved out (up to the cap: 16 MiB by default, not worth
  // a copy at the end of a run); kept() is empty afterwards.
  std::string take_kept() noexcept { return std::move(kept_); }
  std::uint64_t total_bytes() const noexcept { return total_; }  // raw bytes seen
  std::uint64_t masked_bytes() const noexcept { return masked_total_; }  // bytes hashed
  bool truncated() const noexcept { return truncated_; }
  std::uint64_t cap() const noexcept { return cap_; }
  // SHA-256 of the whole masked stream so far (complete after finish()).
  std::string sha256_hex() const { return hash_.hex_digest(); }

 private:
  std::string_view take(std::string_view masked);

  std::uint64_t cap_;
  SecretMasker masker_;
  Sha256 hash_;
  std::string kept_;
  std::string chunk_;  // masked bytes of the last call when masking applies
  std::uint64_t total_ = 0;
  std::uint64_t masked_total_ = 0;
  bool truncated_ = false;
};

// Replaces every occurrence of every non-empty secret in `text` with "***",
// exactly as SecretMasker does for a stream (it is that masker, fed the
// whole text): overlapping occurrences merge into one "***", back-to-back
// ones are a "***" each. For text that is whole at once (a detail, a note,
// an audit line).
std::string scrub_secrets(std::string_view text, std::span<const std::string> secrets);

// Valid UTF-8 unchanged; each maximal ill-formed subsequence (Unicode's
// "substitution of maximal subparts", as WHATWG decoders do) becomes one
// U+FFFD. Overlong forms, surrogates (ED A0..BF) and code points above
// U+10FFFF are ill-formed. NUL bytes are valid and kept.
std::string to_utf8_lossy(std::string_view bytes);

}  // namespace corral
