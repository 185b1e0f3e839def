// The routes file's pre-scan (routes_scan.hpp).
#include "routes_scan.hpp"

#include <string>

namespace corral {
namespace {

// toml++ descends once per dotted key segment and per nested array or
// inline table: 300,000 segments ("a.a.a...=1", a 600 KB line) overflow the
// stack. A routes file needs two segments and two levels; these bounds are
// checked by a scan of our own before the text reaches the parser.
constexpr int kMaxKeySegments = 32;
constexpr int kMaxNesting = 32;

// Skips a string starting at text[i] (a quote); returns the index after its
// end, counting the newlines of a multi-line string into `line`.
std::size_t skip_string(std::string_view text, std::size_t i, int& line) {
  char quote = text[i];
  bool triple = text.substr(i, 3) == std::string(3, quote);
  std::size_t j = i + (triple ? 3 : 1);
  while (j < text.size()) {
    char c = text[j];
    if (c == '\\' && quote == '"') {
      j += 2;
      continue;
    }
    if (c == '\n') {
      if (!triple) return j;  // an unterminated string: the parser says so
      ++line;
    }
    if (c == quote && (!triple || text.substr(j, 3) == std::string(3, quote))) return j + (triple ? 3 : 1);
    ++j;
  }
  return j;
}

}  // namespace

Status check_toml_bounds(std::string_view text, std::string_view path) {
  auto refuse = [&](int line, const std::string& why) {
    return Error::invalid(std::string(path) + ":" + std::to_string(line) + ": " + why);
  };
  int line = 1;
  std::string nesting;     // '[' arrays and '{' inline tables of the value being read
  bool line_start = true;  // before the first character of a line at the top level
  bool in_key = false;     // reading a key (or a table header's name)
  int segments = 1;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\n') {
      ++line;
      if (nesting.empty()) {
        line_start = true;
        in_key = false;
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') continue;
    if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
      continue;
    }
    // TOML allows non-ASCII only inside strings and comments. toml++ 3.3's
    // whitespace test for a non-ASCII character outside them reaches a
    // __builtin_unreachable for some (U+00A1 and up: `é = 1` is undefined
    // behaviour under UBSan), so the scan refuses it first.
    if (static_cast<unsigned char>(c) >= 0x80)
      return refuse(line, "a non-ASCII character outside a string or comment (TOML allows it only there; quote the "
                          "key or value)");
    if (line_start) {
      line_start = false;
      in_key = true;
      segments = 1;
      if (c == '[') {  // a table header: [a.b] or [[a.b]]
        if (i + 1 < text.size() && text[i + 1] == '[') ++i;
        // toml++ 3.3 asserts (aborts, or with NDEBUG assumes) that a header's
        // name starts with a key character or a quote: "[[[route]]" killed
        // corral check with SIGABRT. Anything else is refused here.
        std::size_t k = i + 1;
        while (k < text.size() && (text[k] == ' ' || text[k] == '\t')) ++k;
        char n = k < text.size() ? text[k] : '\n';
        bool key_start = (n >= 'a' && n <= 'z') || (n >= 'A' && n <= 'Z') || (n >= '0' && n <= '9') || n == '_' ||
                         n == '-' || n == '"' || n == '\'';
        if (!key_start) return refuse(line, "a table header must start with a name ([route], [[route]])");
        continue;
      }
    }
    if (c == '"' || c == '\'') {
      i = skip_string(text, i, line) - 1;
      continue;
    }
    if (in_key) {
      if (c == '.' && ++segments > kMaxKeySegments)
        return refuse(line, "a key with more than " + std::to_string(kMaxKeySegments) +
                                " dotted segments; that is not a routes file");
      if (c == '=' || (c == ']' && nesting.empty())) in_key = false;
      continue;
    }
    if (c == '[' || c == '{') {
      nesting.push_back(c);
      if (nesting.size() > static_cast<std::size_t>(kMaxNesting))
        return refuse(line, "arrays or tables nested more than " + std::to_string(kMaxNesting) +
                                " deep; that is not a routes file");
      if (c == '{') {
        in_key = true;
        segments = 1;
      }
    } else if ((c == ']' || c == '}') && !nesting.empty()) {
      nesting.pop_back();
    } else if (c == ',' && !nesting.empty() && nesting.back() == '{') {
      in_key = true;
      segments = 1;
    }
  }
  return {};
}

}  // namespace corral
