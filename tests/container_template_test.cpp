// The container tier's integration tests (container_test.cpp) again, with
// the helpers staged into the workspace instead of bound: as root, a run
// without binds enters the namespace template (ns_template.hpp), so every
// guarantee observed there is observed in the template too.
#define CONTAINER_TEST_STAGED 1
#include "container_test.cpp"
