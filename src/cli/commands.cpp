#include "cli.hpp"

namespace corral::cli {

int run_main(int argc, char** argv);
int enforcement_main(int argc, char** argv);
int check_main(int argc, char** argv);
int batch_main(int argc, char** argv);
int templates_main(int argc, char** argv);
int merge_main(int argc, char** argv);
int session_main(int argc, char** argv);
int conformance_main(int argc, char** argv);

std::span<const Command> commands() {
  static const Command kCommands[] = {
      {"run", run_main},
      {"enforcement", enforcement_main},
      {"check", check_main},
      {"batch", batch_main},
      {"merge", merge_main},
      {"templates", templates_main},
      {"session", session_main},
      {"conformance", conformance_main},
  };
  return kCommands;
}

}  // namespace corral::cli
