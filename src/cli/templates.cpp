// corral templates [--clear]: the container tier's namespace templates
// (ns_template.hpp) this host keeps, or their removal.
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "cli.hpp"
#include "corral/ns_template.hpp"
#include "options.hpp"
#include "output.hpp"

namespace corral::cli {

int templates_main(int argc, char** argv) {
  bool clear = false;
  static const option kOptions[] = {{"help", no_argument, nullptr, 'h'},
                                    {"clear", no_argument, nullptr, 'c'},
                                    {nullptr, 0, nullptr, 0}};
  int operands = argc;
  int rc = parse_options(argc, argv, "templates", "h", kOptions, [&](int opt, const char*) -> int {
    if (opt == 'c') {
      clear = true;
      return -1;
    }
    write_all_fd(1,
                 "usage: corral templates [--clear]\n"
                 "The namespace templates root container runs enter (a shared read-only base mount\n"
                 "tree and an empty network namespace, kept as nsfs bind mounts under\n"
                 "/run/corral/templates/<key>/{mnt,net}, and the programs' user namespaces, one\n"
                 "per id mapping, under /run/corral/templates/users/); a run makes what it needs.\n"
                 "\n"
                 "  --clear   unmount and remove them all (runs in flight keep theirs)\n");
    return 0;
  }, operands);
  if (rc >= 0) return rc;
  if (operands < argc) return say("templates: unexpected argument '%s'", argv[operands]), 2;
  const std::string root(kTemplateRoot);
  if (clear) {
    auto removed = remove_ns_templates(root);
    if (!removed) return say("templates: %s", removed.error().message().c_str()), 125;
    std::printf("removed %d template(s) from %s\n", *removed, root.c_str());
    return 0;
  }
  int n = 0;
  for (auto listed : {list_ns_templates(root), list_userns_templates(root)}) {
    if (!listed) return say("templates: %s", listed.error().message().c_str()), 125;
    for (const auto& path : *listed) {
      std::printf("%s\n", path.c_str());
      ++n;
    }
  }
  if (n == 0) std::printf("no templates under %s\n", root.c_str());
  return 0;
}

}  // namespace corral::cli
