#include "corral/capture.hpp"

#include <algorithm>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "corral/fd.hpp"

namespace corral {

// ---- scrub_secrets ---------------------------------------------------------

std::string scrub_secrets(std::string_view text, std::span<const std::string> secrets) {
  // The streams' masker over the whole text at once: an audit line, a
  // detail or a note masks exactly as the captured output it describes.
  SecretMasker masker(std::vector<std::string>(secrets.begin(), secrets.end()));
  if (!masker.has_secrets()) return std::string(text);
  std::string out;
  masker.feed_into(text, out);
  masker.finish_into(out);
  return out;
}

// ---- SecretSet / SecretMasker ---------------------------------------------

namespace {

// How common a byte is in ordinary program output, roughly (text, code,
// logs): higher is more common. Only the order matters: SecretSet probes a
// secret's two rarest bytes.
int byte_rank(char ch) {
  const auto c = static_cast<unsigned char>(ch);
  if (c == '\n') return 230;
  if (auto at = std::string_view(" etaoinsrhldcumfpgwybvkxjqz").find(static_cast<char>(c)); at != std::string_view::npos)
    return 255 - static_cast<int>(at) * 3;
  if (c >= '0' && c <= '9') return 120;
  if (c >= 'A' && c <= 'Z') return 110;
  if (std::string_view(".,_-/:=\"'()").find(static_cast<char>(c)) != std::string_view::npos) return 100;
  if (c >= 0x21 && c < 0x7f) return 60;
  if (c == '\t' || c == '\r' || c == 0) return 50;
  return 20;  // control and high bytes
}

}  // namespace


SecretSet::SecretSet(std::vector<std::string> secrets) {
  secrets.erase(std::remove_if(secrets.begin(), secrets.end(), [](const std::string& s) { return s.empty(); }),
                secrets.end());
  // Longest first: at one position the first secret found is the longest.
  std::sort(secrets.begin(), secrets.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() > b.size() : a < b;
  });
  secrets.erase(std::unique(secrets.begin(), secrets.end()), secrets.end());
  secrets_ = std::move(secrets);
  for (const auto& s : secrets_) first_bytes_[static_cast<unsigned char>(s.front())] = true;
  probes_.reserve(secrets_.size());
  for (const auto& s : secrets_) {
    // The two rarest bytes (distinct positions; the same byte twice is
    // fine). A one-byte secret probes its byte twice.
    std::uint32_t a = 0, b = s.size() > 1 ? 1 : 0;
    if (byte_rank(s[b]) < byte_rank(s[a])) std::swap(a, b);
    for (std::uint32_t i = 2; i < s.size(); ++i) {
      if (byte_rank(s[i]) < byte_rank(s[a])) {
        b = a;
        a = i;
      } else if (byte_rank(s[i]) < byte_rank(s[b])) {
        b = i;
      }
    }
    probes_.push_back({a, b, static_cast<unsigned char>(s[a]), static_cast<unsigned char>(s[b])});
  }
}

std::size_t SecretSet::find(std::size_t index, std::string_view data, std::size_t from,
                            std::size_t end) const noexcept {
  const std::string& needle = secrets_[index];
  const Probe& pr = probes_[index];
  const std::size_t m = needle.size();
  end = std::min(end, data.size());
  if (end < m || from > end - m) return std::string_view::npos;
  const std::size_t last = end - m;  // the last start that fits
  const char* d = data.data();
  std::size_t p = from;
#if defined(__SSE2__)
  // 16 starts at a time: both probe bytes compared, the whole secret only
  // where both match. Loads stay inside data[0, end): p + 15 + at <= last + m - 1.
  const __m128i b1 = _mm_set1_epi8(static_cast<char>(pr.byte1));
  const __m128i b2 = _mm_set1_epi8(static_cast<char>(pr.byte2));
  for (; last >= 15 && p <= last - 15; p += 16) {
    __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + p + pr.at1));
    __m128i v2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + p + pr.at2));
    auto mask = static_cast<unsigned>(_mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi8(v1, b1), _mm_cmpeq_epi8(v2, b2))));
    while (mask != 0) {
      std::size_t q = p + static_cast<std::size_t>(__builtin_ctz(mask));
      if (std::memcmp(d + q, needle.data(), m) == 0) return q;
      mask &= mask - 1;
    }
  }
#endif
  for (; p <= last; ++p)
    if (static_cast<unsigned char>(d[p + pr.at1]) == pr.byte1 && static_cast<unsigned char>(d[p + pr.at2]) == pr.byte2 &&
        std::memcmp(d + p, needle.data(), m) == 0)
      return p;
  return std::string_view::npos;
}

namespace {

const std::shared_ptr<const SecretSet>& no_secrets() {
  static const auto empty = std::make_shared<const SecretSet>(std::vector<std::string>{});
  return empty;
}

constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
constexpr std::string_view kMask = "***";

// First start p >= from with p < start_limit of secret `index` wholly inside data.
std::size_t find_start(const SecretSet& set, std::size_t index, std::string_view data, std::size_t from,
                       std::size_t start_limit) {
  if (from >= start_limit) return kNone;
  // An occurrence starting before start_limit ends at most here.
  std::size_t end = std::min(data.size(), start_limit - 1 + set.values()[index].size());
  return set.find(index, data, from, end);
}

}  // namespace

SecretMasker::SecretMasker() : secrets_(no_secrets()) {}
SecretMasker::SecretMasker(std::vector<std::string> secrets)
    : secrets_(std::make_shared<const SecretSet>(std::move(secrets))) {}
SecretMasker::SecretMasker(std::shared_ptr<const SecretSet> secrets)
    : secrets_(secrets ? std::move(secrets) : no_secrets()) {}

std::string SecretMasker::feed(std::string_view chunk) {
  std::string out;
  feed_into(chunk, out);
  return out;
}

void SecretMasker::feed_into(std::string_view chunk, std::string& out) {
  if (!has_secrets()) {
    out.append(chunk);
    return;
  }
  if (pending_.empty()) {
    process(chunk, false, out);
    return;
  }
  scratch_.assign(pending_);
  scratch_.append(chunk);
  process(scratch_, false, out);
}

// Whether any occurrence starts before `safe` (what process() would mask).
bool SecretMasker::any_before(std::string_view data, std::size_t safe) const {
  for (std::size_t i = 0; i < secrets_->values().size(); ++i)
    if (find_start(*secrets_, i, data, 0, safe) != kNone) return true;
  return false;
}

MaskedPieces SecretMasker::feed_pieces(std::string_view chunk, std::string& out) {
  if (!has_secrets()) return {{}, chunk};
  const std::size_t before = out.size();
  if (pending_.empty() && pending_covered_ == 0) return feed_body(chunk, 0, before, out);
  const std::size_t longest = secrets_->longest();
  if (chunk.size() < 2 * longest) {
    feed_into(chunk, out);
    return {std::string_view(out).substr(before), {}};
  }
  // The held-back tail is decided with only the first `longest` bytes of
  // the chunk after it: every occurrence starting in the tail ends there.
  // What process() would find over the whole of pending_ + chunk: the
  // hold point lies in the chunk (it is at least longest-1 bytes), so the
  // starts before the chunk are exactly those found here, in order.
  const std::size_t held = pending_.size();
  scratch_.assign(pending_);
  scratch_.append(chunk.substr(0, longest));
  const std::size_t cursor = mask_until(scratch_, std::min(pending_covered_, held), held, out);
  pending_.clear();
  pending_covered_ = 0;
  // cursor - held: the chunk's first bytes already inside the tail's "***" (< longest).
  return feed_body(chunk, cursor - held, before, out);
}

// The chunk itself, its first `covered` bytes already out (inside a
// "***"): a view of it up to the hold point when no occurrence starts
// before that point; otherwise masked into `out`.
MaskedPieces SecretMasker::feed_body(std::string_view chunk, std::size_t covered, std::size_t before,
                                     std::string& out) {
  const std::size_t safe = hold_start(chunk);  // >= covered: the chunk is 0 or >= 2*longest bytes past a tail
  if (!any_before(chunk, safe)) {
    pending_.assign(chunk.substr(safe));
    pending_covered_ = 0;
    return {std::string_view(out).substr(before), chunk.substr(covered, safe - covered)};
  }
  const std::size_t cursor = mask_until(chunk, covered, safe, out);
  pending_covered_ = cursor - safe;
  pending_.assign(chunk.substr(safe));
  return {std::string_view(out).substr(before), {}};
}

std::string_view SecretMasker::feed_view(std::string_view chunk, std::string& out) {
  const std::size_t before = out.size();
  MaskedPieces pieces = feed_pieces(chunk, out);
  if (pieces.head.empty()) return pieces.body;
  if (pieces.body.empty()) return pieces.head;
  out.append(pieces.body);  // the body is in `chunk`, never in `out`
  return std::string_view(out).substr(before);
}

std::string SecretMasker::finish() {
  std::string out;
  finish_into(out);
  return out;
}

void SecretMasker::finish_into(std::string& out) {
  if (!has_secrets() || pending_.empty()) {
    pending_.clear();
    pending_covered_ = 0;
    return;
  }
  scratch_.swap(pending_);
  process(scratch_, true, out);
}

// The decision point of a chunk: the first position p in the last
// longest-1 bytes where data[p..] is a proper prefix of some secret, so an
// occurrence could start there and be completed (or lengthened: a longer
// secret beats a shorter one at the same start) by the next chunk. Every
// start before it can be decided now. Holding back only such a tail, not
// always longest-1 bytes, keeps streamed lines from lagging.
std::size_t SecretMasker::hold_start(std::string_view data) const {
  const auto& secrets = secrets_->values();
  const std::size_t n = data.size();
  const std::size_t hold = secrets_->longest() - 1;
  for (std::size_t p = n > hold ? n - hold : 0; p < n; ++p) {
    if (!secrets_->starts_secret(static_cast<unsigned char>(data[p]))) continue;
    const std::size_t tail = n - p;
    for (const auto& s : secrets) {
      if (s.size() <= tail) break;  // longest first: the rest are shorter still
      if (std::memcmp(s.data(), data.data() + p, tail) == 0) return p;
    }
  }
  return n;
}

// Decides every secret occurrence that starts before the hold point (all
// of them when final), emits text and "***" up to there, and keeps the
// rest as pending_. Bytes of pending_ already swallowed by a mask are
// remembered in pending_covered_, so an occurrence that overlaps them
// merges into that mask instead of printing a second "***" or leaking.
void SecretMasker::process(std::string_view data, bool final, std::string& out) {
  const std::size_t safe = final ? data.size() : hold_start(data);
  const std::size_t cursor = mask_until(data, std::min(pending_covered_, data.size()), safe, out);
  pending_covered_ = cursor - safe;
  // data may be scratch_ (never pending_ itself), so this assign is safe.
  pending_.assign(data.substr(safe));
}

// Emits data[cursor, safe) with every occurrence that starts before `safe`
// masked (data[0, cursor) is already out). Returns where the output stands
// then: at least `safe`, more when a "***" covers bytes past it.
std::size_t SecretMasker::mask_until(std::string_view data, std::size_t cursor, std::size_t safe,
                                     std::string& out) {
  const auto& secrets = secrets_->values();
  if (secrets.size() == 1) {
    const std::string_view s = secrets.front();
    const SecretSet& set = *secrets_;
    for (std::size_t p = find_start(set, 0, data, 0, safe); p != kNone; p = find_start(set, 0, data, p + 1, safe)) {
      if (p >= cursor) {
        out.append(data.substr(cursor, p - cursor));
        out.append(kMask);
      }
      cursor = std::max(cursor, p + s.size());
    }
  } else {
    // next[i]: the next start of secret i at or after the scan position.
    std::vector<std::size_t>& next = next_;
    next.resize(secrets.size());
    for (std::size_t i = 0; i < secrets.size(); ++i) next[i] = find_start(*secrets_, i, data, 0, safe);
    for (;;) {
      std::size_t p = kNone, len = 0;
      for (std::size_t i = 0; i < secrets.size(); ++i) {
        if (next[i] < p) {  // strictly less: ties keep the earlier (longer) secret
          p = next[i];
          len = secrets[i].size();
        }
      }
      if (p == kNone) break;
      if (p >= cursor) {
        out.append(data.substr(cursor, p - cursor));
        out.append(kMask);
      }
      cursor = std::max(cursor, p + len);
      for (std::size_t i = 0; i < secrets.size(); ++i)
        if (next[i] != kNone && next[i] <= p) next[i] = find_start(*secrets_, i, data, p + 1, safe);
    }
  }

  if (cursor < safe) {
    out.append(data.substr(cursor, safe - cursor));
    cursor = safe;
  }
  return cursor;
}

// ---- StreamCapture --------------------------------------------------------

namespace {
constexpr std::uint64_t kGrowToCap = 1 << 20;
constexpr std::uint64_t kReserveCap = 64 << 20;
}  // namespace

StreamCapture::StreamCapture(std::uint64_t cap, SecretMasker masker) : cap_(cap), masker_(std::move(masker)) {}

MaskedPieces StreamCapture::on_data_pieces(std::string_view raw) {
  total_ += raw.size();
  chunk_.clear();
  // The body is raw itself when nothing needed masking; the head, in
  // chunk_, the decided end of the last chunk's held-back tail.
  MaskedPieces pieces = masker_.feed_pieces(raw, chunk_);
  pieces.head = take(pieces.head);
  pieces.body = take(pieces.body);
  return pieces;
}

std::string_view StreamCapture::on_data(std::string_view raw) {
  MaskedPieces pieces = on_data_pieces(raw);
  if (pieces.head.empty()) return pieces.body;
  if (pieces.body.empty()) return pieces.head;
  // Both kept whole (a cut head leaves no body): chunk_ is the head.
  chunk_.append(pieces.body);
  return chunk_;
}

std::string_view StreamCapture::finish() {
  chunk_.clear();
  masker_.finish_into(chunk_);
  return take(chunk_);
}

std::string_view StreamCapture::take(std::string_view masked) {
  if (masked.empty()) return masked;
  masked_total_ += masked.size();
  hash_.update(masked);
  std::uint64_t room = cap_ - std::min<std::uint64_t>(cap_, kept_.size());
  if (masked.size() > room) {
    masked = masked.substr(0, static_cast<std::size_t>(room));
    truncated_ = true;
  }
  if (const std::uint64_t need = kept_.size() + masked.size(); need > kept_.capacity() && need > kGrowToCap) {
    // A stream past 1 MiB reserves its whole cap at once (up to 64 MiB):
    // the kernel backs the reservation a page at a time as it is written,
    // so a long stream no longer pays a copy and fresh pages at every
    // doubling (16 MiB kept took 31 MiB of page faults and 15 MiB of
    // copies that way). A bigger cap grows by four.
    const std::uint64_t to = cap_ <= kReserveCap ? cap_ : std::min(cap_, 4 * need);
    kept_.reserve(static_cast<std::size_t>(std::max(need, to)));
  }
  kept_.append(masked);
  // What is kept is what is passed on: a streaming caller sees the same
  // bytes as the Result, never the part past the cap.
  return masked;
}

// ---- UTF-8 ----------------------------------------------------------------

std::string to_utf8_lossy(std::string_view s) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    std::size_t j = i;
    while (j < n && b[j] < 0x80) ++j;
    out.append(s.substr(i, j - i));
    i = j;
    if (i == n) break;

    const unsigned char c = b[i];
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // UTF-16 surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      out.append(kReplacement);  // 80..C1, F5..FF never start a character
      ++i;
      continue;
    }
    std::size_t k = 1;
    for (; k < len && i + k < n; ++k) {
      const unsigned char x = b[i + k];
      if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) break;
    }
    if (k == len) {
      out.append(s.substr(i, len));
    } else {
      out.append(kReplacement);  // the maximal subpart: lead + valid continuations
    }
    i += k;
  }
  return out;
}

Expected<std::string> read_secret_file(const std::string& path) {
  constexpr std::size_t kMax = 64 << 10;
  const std::string what = "secret file '" + path + "'";
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) return Error::from_errno(errno, "open " + what);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Error::from_errno(errno, "stat " + what);
  if (!S_ISREG(st.st_mode)) return Error::invalid(what + " is not a regular file");
  std::string value;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::from_errno(errno, "read " + what);
    if (n == 0) break;
    value.append(buf, static_cast<std::size_t>(n));
    if (value.size() > kMax) return Error::invalid(what + " is over 64 KiB");
  }
  if (!value.empty() && value.back() == '\n') value.pop_back();
  if (value.empty()) return Error::invalid(what + " is empty; an empty value cannot be masked");
  return value;
}

}  // namespace corral
