// The build-time seccomp filters (see seccomp_builtin.hpp). Compiled twice:
// into libcorral with the generated table, and with
// CORRAL_SECCOMP_NO_BUILTIN (an empty table) into the generator itself,
// which cannot include what it has not written yet.
#include "seccomp_builtin.hpp"

namespace corral::detail {

#ifdef CORRAL_SECCOMP_NO_BUILTIN
namespace {
constexpr BuiltinSeccompOrigin kOrigin{0, 0, 0, 0, 0};
}
const BuiltinSeccomp* builtin_seccomp_table(std::size_t* count) noexcept {
  *count = 0;
  return nullptr;
}
#else
namespace {
#include "seccomp_builtin.inc"  // kOrigin, kTable
}
const BuiltinSeccomp* builtin_seccomp_table(std::size_t* count) noexcept {
  *count = sizeof kTable / sizeof kTable[0];
  return kTable;
}
#endif

const BuiltinSeccompOrigin& builtin_seccomp_origin() noexcept { return kOrigin; }

}  // namespace corral::detail
