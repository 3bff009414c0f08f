#ifndef CEDITLINE_SHIM_H
#define CEDITLINE_SHIM_H
// libedit's readline-compatible API, for line editing and history in `strata shell`.
// Missing header => install the system package: apt-get install libedit-dev
#include <stdio.h>
#include <editline/readline.h>
#endif
