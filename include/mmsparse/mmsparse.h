#pragma once
// Umbrella header for the public C++ API.

#include "mmsparse/attention.h"
#include "mmsparse/build_info.h"
#include "mmsparse/device.h"
#include "mmsparse/layout.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/status.h"
#include "mmsparse/tensor.h"
#include "mmsparse/tools/io.h"
#include "mmsparse/tools/metrics.h"
#include "mmsparse/tools/search.h"
#include "mmsparse/tools/viz.h"
#include "mmsparse/tools/workload.h"
