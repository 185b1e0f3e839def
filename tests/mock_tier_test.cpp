#include "corral/mock_tier.hpp"

#include "corral/route.hpp"
#include "support.hpp"

using namespace corral;
using corral_test::contains;

namespace {

struct Req {
  std::vector<std::string> argv;
};
struct Res {
  int exit_code = 0;
  std::string stdout_text;
};

using Mock = MockTier<Req, Res>;

TierCapabilities real(std::string_view tier) { return *tier_capabilities(tier); }

RouteSpec route_spec(std::string name, Provenance provenance, std::string tier) {
  RouteSpec s;
  s.name = std::move(name);
  s.provenance = provenance;
  s.tier = std::move(tier);
  return s;
}

}  // namespace

Test(mock_tier, answers_from_the_programmed_function) {
  Mock mock;
  cr_assert(mock.program("echo", [](const Req& r) { return Res{0, r.argv.at(1) + "\n"}; }).ok());
  auto res = mock.call("echo", Req{{"echo", "hi"}});
  cr_assert(res.ok(), "%s", res.error().message().c_str());
  cr_assert_eq(res->exit_code, 0);
  cr_assert(res->stdout_text == "hi\n");
  cr_assert_eq(mock.calls("echo"), 1u);
  cr_assert(mock.programmed("echo"));
}

Test(mock_tier, refuses_an_unprogrammed_route_and_never_invents_a_result) {
  Mock mock("payments");
  cr_assert(mock.program("refund", [](const Req&) { return Res{}; }).ok());
  bool called = false;
  cr_assert(mock.program("charge", [&](const Req&) {
                  called = true;
                  return Res{};
                }).ok());
  auto res = mock.call("grader", Req{});
  cr_assert(!res.ok());
  const std::string& msg = res.error().message();
  cr_assert(contains(msg, "mock tier 'payments': route 'grader' is not programmed"), "%s", msg.c_str());
  cr_assert(contains(msg, "programmed: 'charge', 'refund'"), "%s", msg.c_str());
  cr_assert(contains(msg, "never invents"), "%s", msg.c_str());
  cr_assert_eq(res.error().code(), ENOENT);
  cr_assert(!called, "another route's handler answered");
  cr_assert_eq(mock.calls("grader"), 0u);

  Mock empty;
  auto none = empty.call("x", Req{});
  cr_assert(!none.ok() && contains(none.error().message(), "(programmed: none)"));
}

Test(mock_tier, refuses_bad_programming) {
  Mock mock;
  Status empty_route = mock.program("", [](const Req&) { return Res{}; });
  cr_assert(!empty_route.ok() && contains(empty_route.error().message(), "empty route name"));
  Status empty_handler = mock.program("x", Mock::Handler{});
  cr_assert(!empty_handler.ok() && contains(empty_handler.error().message(), "route 'x': the handler is empty"));
  cr_assert(!mock.programmed("x"));
}

Test(mock_tier, reprogramming_replaces_the_answer) {
  Mock mock;
  cr_assert(mock.program("r", [](const Req&) { return Res{1, ""}; }).ok());
  cr_assert(mock.program("r", [](const Req&) { return Res{2, ""}; }).ok());
  cr_assert_eq(mock.call("r", Req{})->exit_code, 2);
}

Test(mock_tier, capabilities_are_never_guessed) {
  Mock mock;
  cr_assert(mock.program("bare", [](const Req&) { return Res{}; }).ok());
  auto caps = mock.capabilities("bare");
  cr_assert(!caps.ok());
  cr_assert(contains(caps.error().message(), "route 'bare' was programmed without the capabilities"),
            "%s", caps.error().message().c_str());
  auto unknown = mock.capabilities("nope");
  cr_assert(!unknown.ok() && contains(unknown.error().message(), "route 'nope' is not programmed"));
}

// A Router built from the mock's capabilities refuses exactly where one
// built from the real tier's declaration does, with the same message.
Test(mock_tier, the_gate_refuses_under_test_where_production_would) {
  Mock mock;
  auto answer = [](const Req&) { return Res{0, "graded"}; };
  cr_assert(mock.program("grader", answer, real("os_process")).ok());
  cr_assert(mock.program("sandboxed", answer, real("container")).ok());

  auto spec = route_spec("grader", Provenance::untrusted, "os_process");
  Router production, under_test;
  auto prod = production.add(spec, real("os_process"), corral_test::all_hard_view());
  auto test = under_test.add(spec, *mock.capabilities("grader"), corral_test::all_hard_view());
  cr_assert(!prod.ok() && !test.ok());
  cr_assert(prod.error().message() == test.error().message(), "%s vs %s",
            prod.error().message().c_str(), test.error().message().c_str());
  cr_assert(contains(test.error().message(), "provenance untrusted needs isolation container"));

  auto ok = under_test.add(route_spec("sandboxed", Provenance::untrusted, "container"),
                           *mock.capabilities("sandboxed"), corral_test::all_hard_view());
  cr_assert(ok.ok(), "%s", ok.error().message().c_str());
  cr_assert(mock.call("sandboxed", Req{})->stdout_text == "graded");
}
