#include "cli.hpp"

namespace corral::cli {

std::span<const Command> commands() {
  // Verbs are added here as they land (run, enforcement, batch, check).
  static const Command kCommands[] = {
      {"", nullptr},
  };
  return std::span<const Command>(kCommands, 0);
}

}  // namespace corral::cli
