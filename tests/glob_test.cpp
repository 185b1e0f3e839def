// corral's one glob dialect (glob.hpp): fnmatch per segment, "**" across
// directories, a trailing "**" for everything below.
#include "corral/glob.hpp"

#include <criterion/criterion.h>

using namespace corral;

namespace {

bool m(const char* glob, const char* path) {
  auto g = Glob::parse(glob);
  cr_assert(g.ok(), "%s: %s", glob, g.error().message().c_str());
  return g->matches(path);
}

}  // namespace

Test(glob, segments_are_fnmatch_patterns) {
  cr_assert(m("*.txt", "a.txt"));
  cr_assert(m("*.txt", ".hidden.txt"), "no FNM_PERIOD: a leading dot is matched by *");
  cr_assert(!m("*.txt", "d/a.txt"), "* stays in its segment");
  cr_assert(m("*/*", "d/a.txt"));
  cr_assert(m("d/?.t[x]t", "d/a.txt"));
  cr_assert(!m("d", "d/a.txt"));
}

Test(glob, doublestar_spans_directories) {
  cr_assert(m("logs/**", "logs/top.txt"));
  cr_assert(m("logs/**", "logs/a/b/deep.txt"));
  cr_assert(!m("logs/**", "logs"), "everything below logs, not logs itself");
  cr_assert(m("**/*.txt", "a.txt"), "** may match no directory");
  cr_assert(m("**/*.txt", "x/y/z.txt"));
  cr_assert(m("a/**/z.txt", "a/z.txt"));
  cr_assert(m("a/**/z.txt", "a/b/c/z.txt"));
  cr_assert(!m("a/**/z.txt", "b/z.txt"));
}

Test(glob, a_walk_descends_only_where_a_match_may_be) {
  auto g = Glob::parse("logs/*.txt");
  cr_assert(g.ok());
  auto root = g->start();
  cr_assert(g->may_descend(g->step(root, "logs")));
  cr_assert(!g->may_descend(g->step(root, "other")));
  auto deep = Glob::parse("logs/**");
  cr_assert(deep->may_descend(deep->step(deep->step(deep->start(), "logs"), "a")));
}

Test(glob, bad_globs_are_refused_by_name) {
  for (const char* bad : {"", "/etc/*", "a//b", "./a", "a/../b"}) {
    auto g = Glob::parse(bad, "collect: glob");
    cr_assert(!g.ok(), "'%s' accepted", bad);
    cr_assert(g.error().message().rfind("collect: ", 0) == 0, "%s", g.error().message().c_str());
  }
}
