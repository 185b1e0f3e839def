#include "options.hpp"

#include <string>

#include "output.hpp"

namespace corral::cli {

int parse_options(int argc, char** argv, const char* verb, const char* shortopts, const option* longopts,
                  const std::function<int(int, const char*)>& on, int& operands) {
  // "+": stop at the first operand (POSIXLY_CORRECT without the
  // environment); ":": a missing value comes back as ':' and the messages
  // are ours, starting "corral:". optind = 0 re-initialises glibc's getopt.
  std::string spec = std::string("+:") + shortopts;
  opterr = 0;
  optind = 0;
  for (;;) {
    int index = -1;
    int c = getopt_long(argc, argv, spec.c_str(), longopts, &index);
    if (c == -1) break;
    const char* given = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
    if (c == '?') {
      if (optopt > 0 && optopt < 128 && given[0] == '-' && given[1] != '-')
        say("%s: unknown option -%c (see corral %s --help)", verb, optopt, verb);
      else
        say("%s: unknown option %s (see corral %s --help)", verb, given, verb);
      return 2;
    }
    if (c == ':') {
      say("%s: option %s needs a value (see corral %s --help)", verb, given, verb);
      return 2;
    }
    if (int rc = on(c, optarg); rc >= 0) return rc;
  }
  operands = optind;
  return -1;
}

}  // namespace corral::cli
