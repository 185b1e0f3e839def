// The scan of a routes file's text before toml++ parses it: toml++ 3.3
// recurses per dotted key segment and per nesting level (a 600 KB line of
// "a.a.a...=1" overflows the stack), asserts on some table headers and
// reaches undefined behaviour on non-ASCII outside strings. The scan
// refuses those first, with "FILE:LINE: ". Private to routes_file.cpp.
#pragma once

#include <string_view>

#include "corral/status.hpp"

namespace corral {

Status check_toml_bounds(std::string_view text, std::string_view path);

}  // namespace corral
