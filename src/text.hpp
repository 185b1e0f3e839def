// Internal: reading and splitting text the kernel writes (mountinfo lines
// and fields, cgroupfs lists, /proc children lists), for the modules that
// read it. Base layer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "corral/status.hpp"

namespace corral::detail {

// The pieces between separators, empty ones included: "a,,b" gives "a",
// "", "b"; "" gives one empty piece. Views into `s`.
std::vector<std::string_view> split(std::string_view s, char sep);

// A file whole, read to the 0: a seq_file in /proc hands out at most a page
// per read, and a mountinfo line can be longer than half of one. Plain
// read(2), no iostream: a stream's first use builds the C++ locale, which a
// one-run CLI would pay for once per process.
Expected<std::string> read_to_end(const std::string& path);

}  // namespace corral::detail
