#pragma once
// headroom: one include for the whole library.  It also brings <iostream> and
// <sstream>, so `std::cout << tensor` and printing to a std::ostringstream
// need no other include.
#include <iostream>
#include <sstream>

#include "headroom/config.h"
#include "headroom/core/backend.h"
#include "headroom/core/error.h"
#include "headroom/core/rng.h"
#include "headroom/core/tensor.h"
#include "headroom/core/threading.h"
#include "headroom/core/grad_mode.h"
#include "headroom/autograd/gradcheck.h"
#include "headroom/ops/shape.h"
#include "headroom/ops/routing.h"
#include "headroom/ops/nn.h"
#include "headroom/ops/elementwise.h"
#include "headroom/ops/reduce.h"
#include "headroom/ops/matmul.h"
#include "headroom/core/image.h"
#include "headroom/core/safetensors.h"
#include "headroom/core/read_file.h"
#include "headroom/models/module.h"
#include "headroom/models/optim.h"
#include "headroom/models/layers.h"
#include "headroom/ops/attention.h"
#include "headroom/models/attention.h"
#include "headroom/models/mha.h"
#include "headroom/models/moa.h"
#include "headroom/models/mae.h"
#include "headroom/models/bcd.h"
#include "headroom/models/moh.h"
#include "headroom/models/config.h"
#include "headroom/models/transformer.h"
#include "headroom/models/decoding.h"
#include "headroom/models/stats.h"
