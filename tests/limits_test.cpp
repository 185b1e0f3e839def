#include "corral/limits.hpp"

#include <sys/resource.h>

#include "support.hpp"

using namespace corral;

Test(limits, parses_integers_with_separators) {
  auto v = parse_limit_value("memory_bytes", "1_073_741_824");
  cr_assert(v.ok());
  cr_assert_eq(*v, 1073741824ULL);
  auto a = parse_limit_assignment("cpu_seconds=2");
  cr_assert(a.ok());
  cr_assert_eq(a->first, Limit::cpu_seconds);
  cr_assert_eq(a->second, 2u);
}

Test(limits, refuses_negative_with_the_limit_named) {
  auto a = parse_limit_assignment("open_files=-1");
  cr_assert(!a.ok());
  cr_assert(a.error().message().find("open_files") != std::string::npos, "%s", a.error().message().c_str());
  cr_assert(a.error().message().find("negative") != std::string::npos, "%s", a.error().message().c_str());
}

Test(limits, refuses_overflow_and_garbage) {
  auto big = parse_limit_value("file_bytes", "99999999999999999999");
  cr_assert(!big.ok());
  cr_assert_eq(big.error().code(), ERANGE);
  cr_assert(big.error().message().find("file_bytes") != std::string::npos);
  cr_assert(!parse_limit_value("file_bytes", "9223372036854775808").ok());  // 2^63
  cr_assert(parse_limit_value("file_bytes", "9223372036854775807").ok());
  for (const char* bad : {"", "1.5", "0x10", "_1", "1_", "1__0", "1e6", " 1", "+1"}) {
    cr_assert(!parse_limit_value("file_bytes", bad).ok(), "accepted '%s'", bad);
  }
}

Test(limits, refuses_unknown_names_by_name) {
  auto a = parse_limit_assignment("cpu_second=1");
  cr_assert(!a.ok());
  cr_assert(a.error().message().find("unknown limit 'cpu_second'") != std::string::npos,
            "%s", a.error().message().c_str());
  cr_assert(!parse_limit_assignment("cpu_seconds").ok());
}

Test(limits, zero_only_where_meaningful) {
  cr_assert(!parse_limit_assignment("wall_seconds=0").ok());
  cr_assert(!parse_limit_assignment("open_files=0").ok());
  cr_assert(parse_limit_assignment("stdout_bytes=0").ok());
  cr_assert(parse_limit_assignment("file_bytes=0").ok());
}

Test(limits, list_form_and_merge) {
  auto l = parse_limit_list("cpu_seconds=1, wall_seconds=5,,open_files=64");
  cr_assert(l.ok());
  cr_assert_eq(*l->get(Limit::cpu_seconds), 1u);
  cr_assert_eq(*l->get(Limit::wall_seconds), 5u);
  cr_assert_eq(*l->get(Limit::open_files), 64u);
  cr_assert(!l->has(Limit::memory_bytes));
  Limits over;
  over.set(Limit::wall_seconds, 9);
  l->merge(over);
  cr_assert_eq(*l->get(Limit::wall_seconds), 9u);
  std::string described = l->describe();
  cr_assert_str_eq(described.c_str(), "cpu_seconds=1, open_files=64, wall_seconds=9");
  auto bad = parse_limit_list("cpu_seconds=1,bogus=2");
  cr_assert(!bad.ok());
  cr_assert(bad.error().message().find("bogus") != std::string::npos);
}

Test(limits, table_maps_rlimits) {
  cr_assert_eq(limit_info(Limit::cpu_seconds).rlimit_resource, RLIMIT_CPU);
  cr_assert_eq(limit_info(Limit::open_files).rlimit_resource, RLIMIT_NOFILE);
  cr_assert_eq(limit_info(Limit::wall_seconds).rlimit_resource, -1);
  for (const auto& info : all_limits()) {
    cr_assert_eq(limit_from_name(info.name), info.limit);
  }
}

// 2^63-1 seconds became a double of 2^63 and wrapped in the timespec: the
// run ended killed_timeout after 0.01 s. Every limit has a max its
// mechanism holds; beyond it the value is refused by name.
Test(limits, values_beyond_the_mechanisms_max_are_refused_by_name_never_wrapped) {
  for (const char* text : {"wall_seconds=9223372036854775807", "cpu_seconds=9223372036854775807",
                           "wall_seconds=1000000001"}) {
    auto a = parse_limit_assignment(text);
    cr_assert(!a.ok(), "%s accepted", text);
    cr_assert_eq(a.error().code(), ERANGE);
    cr_assert(a.error().message().find("more than the maximum 1000000000 (seconds)") != std::string::npos, "%s",
              a.error().message().c_str());
  }
  cr_assert(parse_limit_assignment("wall_seconds=1000000000").ok());
  cr_assert(parse_limit_assignment("memory_bytes=9223372036854775807").ok());
  Limits l;
  cr_assert(!l.set_checked(Limit::wall_seconds, 9223372036854775807ull).ok());
  for (const auto& info : all_limits()) cr_assert_leq(info.max, (std::uint64_t{1} << 63) - 1, "%s", info.name.data());
}
