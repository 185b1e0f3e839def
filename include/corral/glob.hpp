// glob: corral's one glob dialect, for every path pattern a caller gives:
// `--output`, a route's outputs, a session's `ls`. Pure matching; nothing
// here touches the filesystem (the walkers that use it open beneath the
// workspace themselves).
//
// The dialect: a path relative to the workspace, '/'-separated; each
// segment is an fnmatch(3) pattern (no flags: '*' and '?' do not match '/',
// a leading '.' is matched by '*'); a segment "**" matches zero or more
// whole directories. A pattern that ends in "**" means everything below
// ("logs/**": logs/top.txt and logs/a/b/deep.txt, not logs itself). Empty,
// "." and ".." segments and a leading '/' are refused.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "corral/status.hpp"

namespace corral {

class Glob {
 public:
  // `who` starts the error: "collect: glob 'x': empty path segment".
  static Expected<Glob> parse(std::string_view text, std::string_view who = "glob");

  const std::string& text() const { return text_; }
  // The segments as matched ("out/**" is out, **, *).
  const std::vector<std::string>& segments() const { return segs_; }
  // Whether any segment has a pattern character (* ? [).
  bool is_pattern() const;

  // A walk from the root: State says which prefixes of the pattern the
  // path so far matched. step() enters one more name.
  using State = std::vector<char>;
  State start() const;
  State step(const State& state, std::string_view name) const;
  // The path so far matches the whole pattern.
  bool matched(const State& state) const { return state.back() != 0; }
  // Something below the path so far could still match.
  bool may_descend(const State& state) const;

  // A whole relative path ("a/b/c.txt").
  bool matches(std::string_view path) const;

 private:
  std::string text_;
  std::vector<std::string> segs_;
  void close_over_doublestar(State& state) const;
};

}  // namespace corral
