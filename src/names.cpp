#include "corral/names.hpp"

#include <utf8proc.h>

namespace corral {
namespace {

constexpr std::size_t kNameMax = 255;   // NAME_MAX: one segment
constexpr std::size_t kPathMax = 4095;  // PATH_MAX less the NUL

// The name as it may appear in a message: control bytes, and each byte of
// an ill-formed UTF-8 sequence, as \xNN (a message is UTF-8 text; a
// lossy conversion downstream would otherwise hide which bytes they were).
std::string printable(std::string_view name) {
  static const char kHex[] = "0123456789abcdef";
  auto escape = [](std::string& out, unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  std::string out;
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(name.data());
  std::size_t i = 0;
  while (i < name.size()) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) escape(out, c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    utf8proc_int32_t cp;
    utf8proc_ssize_t n = utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(name.size() - i), &cp);
    if (n <= 0 || cp < 0) {
      escape(out, c);
      ++i;
      continue;
    }
    out.append(name.substr(i, static_cast<std::size_t>(n)));
    i += static_cast<std::size_t>(n);
  }
  return out;
}

bool valid_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(text.size());
  while (left > 0) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0 || cp < 0) return false;
    p += n;
    left -= n;
  }
  return true;
}


// The reason `name` fails the lexical checks, or "" when it passes.
std::string lexical_problem_of(std::string_view name) {
  if (name.empty()) return "is empty";
  if (name.size() > kPathMax) return "is longer than 4095 bytes";
  if (name.front() == '/') return "is absolute";
  for (unsigned char c : name) {
    if (c == 0) return "contains a NUL byte";
    if (c == '\\') return "contains a backslash";
    if (c < 0x20 || c == 0x7f) return "contains a control character";
  }
  if (!valid_utf8(name)) return "is not valid UTF-8";
  std::string_view rest = name;
  for (;;) {
    auto slash = rest.find('/');
    std::string_view segment = rest.substr(0, slash);
    if (segment.empty()) return "has an empty segment";
    if (segment == "..") return "has a '..' segment";
    if (segment == ".") return "has a '.' segment";
    if (segment.size() > kNameMax) return "has a segment longer than 255 bytes";
    if (slash == std::string_view::npos) return "";
    rest = rest.substr(slash + 1);
  }
}

}  // namespace

std::string relative_name_problem(std::string_view name) { return lexical_problem_of(name); }

std::string quote_name(std::string_view name) { return "'" + printable(name) + "'"; }

std::string printable_name(std::string_view name) { return printable(name); }

std::string quote_input(std::string_view text, std::size_t max) {
  if (text.size() <= max) return quote_name(text);
  return "'" + printable(text.substr(0, max)) + "...' (" + std::to_string(text.size()) + " bytes)";
}

Status validate_relative_name(std::string_view name, std::string_view what) {
  std::string problem = lexical_problem_of(name);
  if (problem.empty()) return {};
  return Error::invalid(std::string(what) + " " + quote_input(name) + " " + problem);
}

}  // namespace corral
