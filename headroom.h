#pragma once
// headroom: one include for the whole library.
#include "headroom/config.h"
#include "headroom/core/backend.h"
#include "headroom/core/error.h"
#include "headroom/core/rng.h"
#include "headroom/core/tensor.h"
#include "headroom/core/threading.h"
#include "headroom/cuda/cuda.h"
#include "headroom/autograd/grad_mode.h"
#include "headroom/autograd/gradcheck.h"
#include "headroom/autograd/node.h"
#include "headroom/ops/shape.h"
#include "headroom/ops/routing.h"
