// corral's one glob dialect (glob.hpp).
#include "corral/glob.hpp"

#include <fnmatch.h>

#include "corral/names.hpp"

namespace corral {

Expected<Glob> Glob::parse(std::string_view text, std::string_view who_prefix) {
  const std::string who = std::string(who_prefix) + " " + quote_input(text);
  if (text.empty()) return Error::invalid(std::string(who_prefix) + ": empty glob");
  if (text.front() == '/') return Error::invalid(who + ": must be relative to the workspace");
  Glob g;
  g.text_ = std::string(text);
  std::size_t at = 0;
  for (;;) {
    auto slash = text.find('/', at);
    std::string seg(text.substr(at, slash == std::string_view::npos ? std::string_view::npos : slash - at));
    if (seg.empty()) return Error::invalid(who + ": empty path segment");
    if (seg == "." || seg == "..") return Error::invalid(who + ": '" + seg + "' segment not allowed");
    g.segs_.push_back(std::move(seg));
    if (slash == std::string_view::npos) break;
    at = slash + 1;
  }
  if (g.segs_.back() == "**") g.segs_.push_back("*");  // "out/**": everything below out, not out itself
  return g;
}

bool Glob::is_pattern() const { return text_.find_first_of("*?[") != std::string::npos; }

void Glob::close_over_doublestar(State& state) const {
  for (std::size_t i = 0; i < segs_.size(); ++i)
    if (state[i] && segs_[i] == "**") state[i + 1] = 1;
}

Glob::State Glob::start() const {
  State s(segs_.size() + 1, 0);
  s[0] = 1;
  close_over_doublestar(s);
  return s;
}

Glob::State Glob::step(const State& state, std::string_view name) const {
  State next(segs_.size() + 1, 0);
  const std::string n(name);
  for (std::size_t i = 0; i < segs_.size(); ++i) {
    if (!state[i]) continue;
    if (segs_[i] == "**") next[i] = 1;
    else if (::fnmatch(segs_[i].c_str(), n.c_str(), 0) == 0) next[i + 1] = 1;
  }
  close_over_doublestar(next);
  return next;
}

bool Glob::may_descend(const State& state) const {
  for (std::size_t i = 0; i < segs_.size(); ++i)
    if (state[i]) return true;
  return false;
}

bool Glob::matches(std::string_view path) const {
  State s = start();
  std::size_t at = 0;
  for (;;) {
    auto slash = path.find('/', at);
    s = step(s, path.substr(at, slash == std::string_view::npos ? std::string_view::npos : slash - at));
    if (slash == std::string_view::npos) break;
    if (!may_descend(s)) return false;
    at = slash + 1;
  }
  return matched(s);
}

}  // namespace corral
