// Small output helpers shared by the CLI verbs.
#pragma once

#include <cstdarg>
#include <string_view>

namespace corral::cli {

// Write all of `data` to fd (EINTR-safe; a closed reader is ignored).
void write_all_fd(int fd, std::string_view data);
// One "corral: ..." line on stderr. Every line corral itself writes there
// goes through this.
void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Exit status for a corral-side error: 2 when the request is refused or
// malformed, 125 when corral itself failed.
int exit_code_for_error(int err);

}  // namespace corral::cli
