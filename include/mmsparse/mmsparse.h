#pragma once
// Umbrella header for the public C++ API.

#include "mmsparse/attention.h"
#include "mmsparse/build_info.h"
#include "mmsparse/device.h"
#include "mmsparse/io.h"
#include "mmsparse/layout.h"
#include "mmsparse/metrics.h"
#include "mmsparse/patterns.h"
#include "mmsparse/plan.h"
#include "mmsparse/search.h"
#include "mmsparse/status.h"
#include "mmsparse/tensor.h"
#include "mmsparse/viz.h"
#include "mmsparse/workload.h"
