// Symbol visibility. The library is built with -fvisibility=hidden; only the
// C ABI (corral.h) is exported from libcorral.so. The C++ API is used
// through the static library.
#pragma once
#define CORRAL_API __attribute__((visibility("default")))
