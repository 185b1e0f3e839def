// Internal: splitting text the kernel writes (mountinfo lines and fields,
// cgroupfs lists), for the modules that read it. Base layer.
#pragma once

#include <string_view>
#include <vector>

namespace corral::detail {

// The pieces between separators, empty ones included: "a,,b" gives "a",
// "", "b"; "" gives one empty piece. Views into `s`.
std::vector<std::string_view> split(std::string_view s, char sep);

}  // namespace corral::detail
