#ifndef CLZ4_SHIM_H
#define CLZ4_SHIM_H
// liblz4's block API. Missing header => install the system package: apt-get install liblz4-dev
#include <lz4.h>
#endif
