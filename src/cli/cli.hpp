// The CLI's verbs. Each lives in its own file and registers here.
#pragma once

#include <span>
#include <string_view>

namespace corral::cli {

struct Command {
  std::string_view name;
  int (*main)(int argc, char** argv);  // argv[0] is the verb
};

// Every verb this build has.
std::span<const Command> commands();

}  // namespace corral::cli
