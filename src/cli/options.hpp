// getopt_long for every verb: `--opt=value` and `--opt value`, short
// forms, `--` optional, parsing stops at the first operand (PROGRAM, FILE)
// so a program's own options stay its own; an unknown option or a missing
// value is a "corral: ..." usage line and exit 2.
#pragma once

#include <getopt.h>

#include <functional>

namespace corral::cli {

// Calls `on(val, optarg)` for each option of `longopts` (getopt_long's
// table, ended by a zero entry; `shortopts` without the leading "+:").
// `on` returns -1 to go on, or an exit code that stops the parse.
// Returns -1 with `operands` set to the index of the first operand, or an
// exit code (2 for a usage error). `verb` names the verb in messages.
int parse_options(int argc, char** argv, const char* verb, const char* shortopts, const option* longopts,
                  const std::function<int(int, const char*)>& on, int& operands);

}  // namespace corral::cli
