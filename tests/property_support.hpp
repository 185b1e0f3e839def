// The generator and the checks of the parsers' property test
// (parsers_property_test.cpp): a seeded PRNG, random and mutated text, and
// the property every parser of untrusted text must keep — it returns a
// value or a clean error, and never crashes, hangs or throws.
#pragma once

#include <criterion/criterion.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "corral/names.hpp"
#include "corral/status.hpp"

namespace corral_test {

// splitmix64: small, fast and the same sequence on every host, so a failure
// is reproduced by its seed and iteration alone.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(next() % n); }
  bool percent(unsigned p) { return below(100) < p; }
  template <class C>
  const auto& pick(const C& items) { return items[below(items.size())]; }

 private:
  std::uint64_t s_;
};

// Bytes that break parsers: NUL, controls, a lone continuation byte, an
// overlong '/', a surrogate, a truncated sequence, 0xff, quotes, escapes.
inline const std::vector<std::string>& nasty_pieces() {
  static const std::vector<std::string> pieces{
      std::string(1, '\0'), "\x01", "\x1b[31m", "\x7f", "\x80", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\xff\xfe",
      "\"", "'", "\\", "\\u0000", "\\ud800", "\n", "\r\n", "\t", "=", ",", ":", ":/", "/", "..", "_", "-", ".",
      "[", "]", "{", "}", "*", "?", "**", "#", " ", "\xc3\xa9", "\xef\xbc\x8f", "18446744073709551616",
      "9223372036854775807", "9223372036854775808", "1e999", "-0", "0x10", "1_000", "nan", "inf",
  };
  return pieces;
}

inline std::string random_bytes(Rng& rng, std::size_t max_len) {
  std::string out(rng.below(max_len + 1), '\0');
  for (auto& c : out) c = static_cast<char>(rng.next() & 0xff);
  return out;
}

// One mutation of `text`: flip, insert (a nasty piece or a random byte),
// delete or duplicate a range, truncate, or splice in deep nesting or an
// overlong run. Several in a row make most inputs invalid in new ways.
inline std::string mutate(Rng& rng, std::string text) {
  std::size_t at = rng.below(text.size() + 1);
  switch (rng.below(9)) {
    case 0:
      if (!text.empty()) text[rng.below(text.size())] ^= static_cast<char>(1u << rng.below(8));
      break;
    case 1: text.insert(at, rng.pick(nasty_pieces())); break;
    case 2: text.insert(at, 1, static_cast<char>(rng.next() & 0xff)); break;
    case 3: text.erase(at, rng.below(16)); break;
    case 4: text.insert(at, text.substr(at, rng.below(32))); break;
    case 5: text.resize(at); break;
    case 6: {  // deep nesting, balanced or not
      std::size_t depth = 1 + rng.below(rng.percent(3) ? 200000 : 64);
      std::string open = rng.pick(std::vector<std::string>{"[", "{", "{\"a\":", "a=[", "{a=", "a."});
      std::string nest;
      for (std::size_t i = 0; i < depth; ++i) nest += open;
      text.insert(at, nest);
      break;
    }
    case 7: text.insert(at, std::string(1 + rng.below(rng.percent(3) ? 300000 : 5000), "a9_.["[rng.below(5)])); break;
    default: text.insert(at, random_bytes(rng, 8)); break;
  }
  return text;
}

inline std::string mutated(Rng& rng, std::string text) {
  for (std::size_t n = 1 + rng.below(3); n > 0; --n) text = mutate(rng, std::move(text));
  return text;
}

// The input as a message can show it: escaped and cut to `max` bytes.
inline std::string shown(std::string_view input, std::size_t max = 200) {
  std::string p = corral::printable_name(input.substr(0, max));
  if (input.size() > max) p += "... (" + std::to_string(input.size()) + " bytes)";
  return p;
}

// The longest error message a parser may give: enough to name a field, the
// value (shortened) and the accepted forms; an error that repeats a whole
// megabyte of input names nothing clearly.
inline constexpr std::size_t kMaxMessage = 4096;

// A clean error: says something, is printable UTF-8 (it goes to a terminal
// through printf's %s, where a NUL would cut it and an escape sequence
// would act), and is bounded.
inline void assert_clean_error(const char* parser, std::string_view input, const corral::Error& e) {
  const std::string& m = e.message();
  cr_assert(!m.empty(), "%s: an empty error for input '%s'", parser, shown(input).c_str());
  cr_assert(m.size() <= kMaxMessage, "%s: a %zu-byte error for input '%s': %s", parser, m.size(),
            shown(input).c_str(), shown(m, 400).c_str());
  cr_assert(corral::printable_name(m) == m, "%s: the error is not printable UTF-8 for input '%s': %s", parser,
            shown(input).c_str(), shown(m, 400).c_str());
}

// Runs `f`, which must not throw (a crash or a hang fails the test on its own).
template <class F>
void no_throw(const char* parser, std::string_view input, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    cr_assert_fail("%s threw %s for input '%s'", parser, e.what(), shown(input).c_str());
  } catch (...) {
    cr_assert_fail("%s threw for input '%s'", parser, shown(input).c_str());
  }
}

}  // namespace corral_test
