#include "mmsparse/build_info.h"
#include <cstdio>
int main() { std::printf("mmsparse %s\n", mmsparse::build_info().version.c_str()); }
