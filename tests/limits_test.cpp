#include "corral/limits.hpp"

#include <sys/resource.h>

#include <cstring>

#include "support.hpp"

using namespace corral;

Test(limits, parses_integers_with_separators) {
  auto v = parse_limit_value("memory_bytes", "1_073_741_824");
  cr_assert(v.ok());
  cr_assert_eq(*v, 1073741824ULL);
  auto a = parse_limit_assignment("cpu_seconds=2");
  cr_assert(a.ok());
  cr_assert_eq(a->limit, Limit::cpu_seconds);
  cr_assert_eq(a->raw, 2000u);  // stored in milliseconds
}

// One parser for every front end: seconds to the millisecond, bytes with SI
// (K M G T: 1000^n) and IEC (Ki Mi Gi Ti, KiB ...: 1024^n) units, counts
// whole. Before, "1.5" and "512M" were "not a non-negative integer".
Test(limits, units_and_fractions) {
  struct Case {
    const char* text;
    Limit limit;
    std::uint64_t raw;
  } cases[] = {
      {"wall_seconds=1.5", Limit::wall_seconds, 1500},      {"cpu_seconds=0.25", Limit::cpu_seconds, 250},
      {"cpu_seconds=250ms", Limit::cpu_seconds, 250},       {"wall_seconds=2s", Limit::wall_seconds, 2000},
      {"wall_seconds=0.001", Limit::wall_seconds, 1},       {"wall_seconds=1_000", Limit::wall_seconds, 1000000},
      {"memory_bytes=512M", Limit::memory_bytes, 512000000}, {"memory_bytes=512MB", Limit::memory_bytes, 512000000},
      {"memory_bytes=512MiB", Limit::memory_bytes, 536870912}, {"memory_bytes=512Mi", Limit::memory_bytes, 536870912},
      {"file_bytes=1G", Limit::file_bytes, 1000000000},     {"file_bytes=1GiB", Limit::file_bytes, 1073741824},
      {"file_bytes=1.5K", Limit::file_bytes, 1500},          {"file_bytes=0.5KiB", Limit::file_bytes, 512},
      {"stdout_bytes=10k", Limit::stdout_bytes, 10000},      {"file_bytes=7B", Limit::file_bytes, 7},
      {"memory_bytes=2T", Limit::memory_bytes, 2000000000000}, {"open_files=64", Limit::open_files, 64},
  };
  for (const auto& c : cases) {
    auto a = parse_limit_assignment(c.text);
    cr_assert(a.ok(), "%s: %s", c.text, a.ok() ? "" : a.error().message().c_str());
    cr_assert_eq(a->limit, c.limit, "%s", c.text);
    cr_assert_eq(a->raw, c.raw, "%s: %llu", c.text, static_cast<unsigned long long>(a->raw));
  }
  for (const char* bad : {"memory_bytes=512X", "memory_bytes=512m", "wall_seconds=1.0005", "wall_seconds=0.0001",
                          "process_count=1.5", "open_files=1K", "file_bytes=1.0001K", "wall_seconds=1.", "wall_seconds=.5",
                          "wall_seconds=1.5.1", "memory_bytes=1 GiB", "cpu_seconds=0ms", "wall_seconds=1h"}) {
    auto a = parse_limit_assignment(bad);
    cr_assert(!a.ok(), "accepted '%s'", bad);
    std::string name(bad, std::strchr(bad, '=') - bad);
    cr_assert(a.error().message().find("limit " + name) != std::string::npos, "%s: %s", bad,
              a.error().message().c_str());
  }
  auto unit = parse_limit_assignment("memory_bytes=512X");
  cr_assert(unit.error().message().find("'512X': unknown unit 'X'") != std::string::npos, "%s",
            unit.error().message().c_str());
  // A JSON or TOML number is its shortest text: 0.1 is 100 ms, not a
  // "finer than a millisecond" 0.10000000000000001.
  auto tenth = parse_limit_number(limit_info(Limit::wall_seconds), 0.1);
  cr_assert(tenth.ok());
  cr_assert_eq(*tenth, 100u);
  cr_assert(!parse_limit_number(limit_info(Limit::wall_seconds), 0.0001).ok());
  cr_assert_eq(*parse_limit_number(limit_info(Limit::file_bytes), 1e9), 1000000000u);
}

Test(limits, fractional_seconds_are_exact_and_round_up_only_for_whole_second_consumers) {
  auto l = parse_limit_list("cpu_seconds=0.25,wall_seconds=1.5,memory_bytes=1KiB");
  cr_assert(l.ok());
  cr_assert_eq(*l->raw(Limit::cpu_seconds), 250u);
  cr_assert_eq(*l->seconds(Limit::cpu_seconds), 0.25);
  cr_assert_eq(*l->get(Limit::cpu_seconds), 1u);  // RLIMIT_CPU's backstop: rounded up
  cr_assert(l->fractional(Limit::cpu_seconds));
  cr_assert_eq(*l->get(Limit::memory_bytes), 1024u);
  std::string described = l->describe();
  cr_assert_str_eq(described.c_str(), "cpu_seconds=0.25, memory_bytes=1024, wall_seconds=1.5");
  Limits whole;
  whole.set(Limit::wall_seconds, 5);
  cr_assert_eq(*whole.raw(Limit::wall_seconds), 5000u);
  cr_assert(!whole.fractional(Limit::wall_seconds));
  std::string text = whole.text(Limit::wall_seconds);
  cr_assert_str_eq(text.c_str(), "5");
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
